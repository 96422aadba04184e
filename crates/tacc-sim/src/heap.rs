//! Huge pages for the engine's heap (Linux with glibc; elsewhere nothing is done).
//!
//! A large fabric's run reads ports, endpoints, packets and the event wheel at random across
//! a hundred megabytes: with 4 KiB pages nearly every such read also misses the TLB and walks
//! the page tables. The kernel backs memory with 2 MiB pages where it is asked to
//! (`madvise(MADV_HUGEPAGE)`; most distributions enable transparent huge pages only so), but
//! glibc's heap grows by a few pages at a time, each touched as soon as it is mapped. So, for
//! a fabric whose ports alone outgrow a core's L2 cache (`Sim::new`):
//! - the heap is made to grow in large steps (`M_TOP_PAD`), and the allocations the run
//!   makes, large arrays included (`M_MMAP_THRESHOLD`), are kept in it;
//! - the heap is advised as it grows (`advise`, at the run's start and every million
//!   events): the part of each step not touched yet is then backed by huge pages.
//!
//! A small run gains nothing (its pages fit the TLB) and would pay for zeroing huge pages.
//! This changes no result, only where memory comes from.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn sbrk(increment: isize) -> *mut c_void;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    const M_TOP_PAD: c_int = -2;
    const M_MMAP_THRESHOLD: c_int = -3;
    const MADV_HUGEPAGE: c_int = 14;
    /// Each growth of the heap: as much again as a huge page is large, many times over.
    const STEP: c_int = 64 << 20;
    /// glibc's largest: larger allocations are mapped on their own (and not advised).
    const LARGEST_IN_HEAP: c_int = 32 << 20;
    const PAGE: usize = 4096;

    /// The heap's break when `grow_in_large_steps` was first called (0: not yet).
    static START: AtomicUsize = AtomicUsize::new(0);

    pub fn grow_in_large_steps() {
        if START.load(Ordering::Relaxed) != 0 {
            return;
        }
        // SAFETY: mallopt and sbrk(0) only set allocator parameters and read the break.
        let start = unsafe {
            mallopt(M_TOP_PAD, STEP);
            mallopt(M_MMAP_THRESHOLD, LARGEST_IN_HEAP);
            sbrk(0) as usize
        };
        if start != usize::MAX {
            START.store(start.next_multiple_of(PAGE), Ordering::Relaxed);
        }
    }

    pub fn advise() {
        let start = START.load(Ordering::Relaxed);
        if start == 0 {
            return;
        }
        // SAFETY: sbrk(0) reads the break; madvise with MADV_HUGEPAGE changes no content of
        // the mapped pages from `start` (the break when the heap was first seen) to it.
        unsafe {
            let end = sbrk(0) as usize / PAGE * PAGE;
            if end > start {
                madvise(start as *mut c_void, end - start, MADV_HUGEPAGE);
            }
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub fn grow_in_large_steps() {}
    pub fn advise() {}
}

/// Makes the heap grow in large steps, from now on (once per process).
pub fn grow_in_large_steps() {
    imp::grow_in_large_steps();
}

/// Asks for huge pages over the heap grown since `grow_in_large_steps`.
pub fn advise() {
    imp::advise();
}
