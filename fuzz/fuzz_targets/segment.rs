#![no_main]
//! The body is `evi::fuzz_targets::segment`, shared with the stable corpus replay test.

libfuzzer_sys::fuzz_target!(|data: &[u8]| evi::fuzz_targets::segment(data));
