//! Huge pages for a large fabric's heap (Linux with glibc; elsewhere nothing is done).
//!
//! A large fabric's run reads ports, endpoints, packets and the event wheel at random across
//! tens to hundreds of megabytes: with 4 KiB pages nearly every such read also misses the TLB
//! and walks the page tables. The kernel backs memory with 2 MiB pages where it is asked to
//! (`madvise(MADV_HUGEPAGE)`; most distributions enable transparent huge pages only so), but
//! only memory not touched yet, and glibc's heap grows a few pages at a time, each touched as
//! soon as it is mapped. So, for a fabric whose ports outgrow a core's L2 cache (the build
//! calls `use_huge_pages` before allocating them):
//! - the heap grows in large steps (`M_TOP_PAD`) and keeps the allocations, large arrays
//!   included (`M_MMAP_THRESHOLD`);
//! - every thread allocates from it (`M_ARENA_MAX`, `one_arena`): glibc gives each new
//!   thread an arena of its own, in 4 KiB pages, and a partitioned run builds its copies of
//!   the world and runs its partitions on threads of its own; a partition in such an arena
//!   ran slower than the one in the main heap, and the other threads waited for it;
//! - it grows by one step at once, and is advised before the build touches that step;
//! - the run advises it again as it grows (`advise`, every million events).
//!
//! A small run gains nothing (its pages fit the TLB) and would pay for zeroing huge pages.
//! This changes no result, only where memory comes from.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use std::alloc::{alloc, dealloc, Layout};
    use std::ffi::{c_int, c_void};
    use std::sync::atomic::{AtomicUsize, Ordering};

    extern "C" {
        fn mallopt(param: c_int, value: c_int) -> c_int;
        fn sbrk(increment: isize) -> *mut c_void;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    const M_TOP_PAD: c_int = -2;
    const M_MMAP_THRESHOLD: c_int = -3;
    const M_ARENA_MAX: c_int = -8;
    const MADV_HUGEPAGE: c_int = 14;
    /// Each growth of the heap: many huge pages.
    const STEP: c_int = 64 << 20;
    /// glibc's largest: larger allocations are mapped on their own (and not advised).
    const LARGEST_IN_HEAP: c_int = 32 << 20;
    const PAGE: usize = 4096;

    /// The heap's break when huge pages were first asked for (0: not yet): what lies before
    /// is not the engine's.
    static START: AtomicUsize = AtomicUsize::new(0);

    pub fn use_huge_pages() {
        if START.load(Ordering::Relaxed) == 0 {
            // SAFETY: mallopt sets allocator parameters and sbrk(0) reads the break.
            let start = unsafe {
                mallopt(M_TOP_PAD, STEP);
                mallopt(M_MMAP_THRESHOLD, LARGEST_IN_HEAP);
                sbrk(0) as usize
            };
            one_arena();
            if start == usize::MAX {
                return;
            }
            START.store(start.next_multiple_of(PAGE), Ordering::Relaxed);
            // A block larger than what the heap has free makes it grow by a step now; freed,
            // it leaves that step untouched at the heap's top, to be advised below.
            let probe = Layout::from_size_align(1 << 20, PAGE).expect("a valid layout");
            // SAFETY: a block allocated with `probe` and freed with it, never read.
            unsafe {
                let p = alloc(probe);
                if !p.is_null() {
                    dealloc(p, probe);
                }
            }
        }
        advise();
    }

    pub fn one_arena() {
        // SAFETY: mallopt sets an allocator parameter.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
        }
    }

    pub fn advise() {
        let start = START.load(Ordering::Relaxed);
        if start == 0 {
            return;
        }
        // SAFETY: sbrk(0) reads the break; MADV_HUGEPAGE changes no content of the pages
        // mapped from `start` to it.
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
    pub fn use_huge_pages() {}
    pub fn one_arena() {}
    pub fn advise() {}
}

/// Puts what is allocated from now on on huge pages where the system allows (see above).
pub fn use_huge_pages() {
    imp::use_huge_pages();
}

/// Makes every thread allocate from glibc's main heap from now on. Threads allocate little
/// during a run (an endpoint per flow; packets and events come from the engine's own pools):
/// one arena's lock costs nothing. It must come before any other thread's first allocation:
/// glibc hands a new thread the arena of one that has ended before it limits their count, so
/// a thread started earlier and ended (a Python program's, say) would leave its arena, in
/// 4 KiB pages, to the first partition the engine builds on a thread of its own.
pub fn one_arena() {
    imp::one_arena();
}

/// Extends the huge pages to the heap grown since the last call; nothing if
/// `use_huge_pages` was never called.
pub fn advise() {
    imp::advise();
}
