//! The state machines several mechanisms share: the token bucket, the per-NIC share allocator
//! and the keyed limiter of HyGenICC, SDN-GCC and static limits, and the keys every
//! rate-limiting kind takes.

pub mod keys;
pub mod rate_alloc;
pub mod token_bucket;
