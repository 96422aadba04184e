//! The vocabulary every layer above speaks, naming no mechanism: time and units, the header
//! fields mechanisms read and write and those fields on real bytes, the control plane's
//! messages, the roles a mechanism plays and the fabric it is built for, and what a kind's
//! table is (its keys' checks and the trait that builds it).

pub mod control;
pub mod headers;
pub mod keys;
pub mod roles;
pub mod units;
pub mod wire;
