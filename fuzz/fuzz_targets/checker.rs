//! The analysis `ksc check` runs (reading, lowering, checking through the
//! incremental database, and the gdefs' derivations of a clean file) never
//! panics on any text, and every diagnostic points into its file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(text) = ksc_fuzz::text(data) else { return };
    ksc_fuzz::check(&text);
});
