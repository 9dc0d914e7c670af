//! How the C allocator treats the big buffers sync goes through.
//!
//! Pull and push handle buffers of 1 to 16 MB one after another (a page's
//! ciphertext, its plaintext, a batch body). glibc serves a buffer that big
//! with its own `mmap`, and gives it back at `free`, but after the first
//! such free it raises that threshold to the freed size (up to 32 MiB), so
//! every later buffer comes from the heap, where a freed one stays resident
//! behind smaller live allocations. On the 400 MB bench home that kept a
//! fresh pull at 73 MiB of RSS; with the threshold fixed at 1 MiB (which
//! also stops the raising), 56 MiB, with the same heap.

/// Buffers of this size and more are mapped alone and unmapped when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 1 << 20;

/// Fixes glibc's mmap threshold (see the module's doc), unless the user set
/// it with glibc's own variables (`MALLOC_MMAP_THRESHOLD_`, or
/// `glibc.malloc.mmap_threshold` in `GLIBC_TUNABLES`), which then stand.
/// Call once, first thing in `main`; elsewhere it does nothing.
pub fn return_big_buffers() {
    let set_by_user = std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("mmap_threshold"));
    if set_by_user {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before
    // any other thread exists, and M_MMAP_THRESHOLD accepts any value up to
    // 32 MiB.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
