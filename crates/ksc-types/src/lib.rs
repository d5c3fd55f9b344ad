//! ksc-types
