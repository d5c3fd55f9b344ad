//! The reader never panics and never fails: any bytes (as text, invalid
//! UTF-8 replaced) give a file and errors that point into the text.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ksc_fuzz::read(data));
