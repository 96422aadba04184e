//! One folder per kind: its state machines (`mod.rs`, playing the roles) and its table
//! (`keys.rs`: the keys, their checks and how the kind is built for a fabric). A kind uses the
//! vocabulary and the shared limiters, never another kind.

pub mod hygenicc;
pub mod rwndq;
pub mod sdn_ecn;
pub mod sdn_gcc;
pub mod sicc;
pub mod static_rate;
