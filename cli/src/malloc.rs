//! How the C allocator treats the big buffers sync goes through.
//!
//! Pull and push handle buffers of 1 to 16 MB one after another (a page's
//! ciphertext, its plaintext, a batch body). glibc serves a buffer that big
//! with its own `mmap`, and gives it back at `free`, but after the first
//! such free it raises that threshold to the freed size (up to 32 MiB), so
//! every later buffer comes from the heap, where a freed one stays resident
//! behind smaller live allocations. On the 400 MB bench home that kept a
//! fresh pull at 73 MiB of RSS; with the threshold fixed at 1 MiB (which
//! also stops the raising), 56 MiB, with the same heap. Since a pull opens
//! the next page on other threads while it writes one, how many arenas
//! glibc keeps, and what they keep of what was freed, matter as much (see
//! [`tune_allocator`], [`give_back_freed`]).

/// Buffers of this size and more are mapped alone and unmapped when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 1 << 20;

/// Fixes glibc's mmap threshold (see the module's doc) and keeps one arena
/// per core (glibc's default is eight per core: each thread that sync
/// starts, for a page's records or a batch of blobs, may take a new one,
/// and each keeps what its thread freed; on 2 cores a fresh pull of the
/// bench home peaked at 65 MiB with them and at 62 MiB with two). Settings
/// the user made with glibc's own variables (`MALLOC_MMAP_THRESHOLD_`,
/// `MALLOC_ARENA_MAX`, or those in `GLIBC_TUNABLES`) stand. Call once,
/// first thing in `main`; elsewhere it does nothing.
pub fn tune_allocator() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    let user_threshold =
        std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() || tunables.contains("mmap_threshold");
    let user_arenas =
        std::env::var_os("MALLOC_ARENA_MAX").is_some() || tunables.contains("arena_max");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // any other thread exists, M_MMAP_THRESHOLD accepts any value up to 32
    // MiB, and M_ARENA_MAX any positive count.
    #[allow(unsafe_code)]
    unsafe {
        if !user_threshold {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
        if !user_arenas {
            let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (user_threshold, user_arenas, cores);
}

/// Hands the memory freed since back to the system, in every arena: glibc
/// returns a heap's free pages only from its top, and a pull's threads
/// free a page's thousands of lines behind allocations that live on. A
/// pull calls it after each page (a few milliseconds, on the thread that
/// opens the next page, not on the one that writes).
pub fn give_back_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; any thread may call it.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}
