//! exchanges
