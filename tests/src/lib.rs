//! Helpers shared by the end-to-end tests live in tests/tests/e2e/.
