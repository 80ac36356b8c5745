//! The schema types, as the core has them (its registry is embedded: kafkawire_core::spec).
pub use kafkawire_core::schema::*;
