//! One end-to-end test binary (one link step), a module per area.
