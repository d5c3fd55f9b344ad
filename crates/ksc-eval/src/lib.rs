//! ksc-eval
