//! One folder per kind: its table, which is the configuration its state machines take
//! (`config.rs`: the keys, their defaults and checks), its state machines (`mod.rs`, playing
//! the roles) and how it is built for a fabric (`build.rs`). A kind uses the vocabulary and the
//! shared limiters, never another kind.

pub mod hygenicc;
pub mod rwndq;
pub mod sdn_ecn;
pub mod sdn_gcc;
pub mod sicc;
pub mod static_rate;
