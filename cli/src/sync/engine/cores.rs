//! Work spread over the machine's cores (at most [`MAX_THREADS`]), for the
//! independent parts of a sync: records opened, sessions written, entries'
//! own bytes read. Results keep the order of their items, so what is
//! applied after them is applied in the same order as on one core.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// More threads than this gain nothing on what a sync does in parallel.
const MAX_THREADS: usize = 8;

/// Threads to use: the machine's cores, at most [`MAX_THREADS`].
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
}

/// `f` over `items`, on all cores: each item is independent. Results in the
/// order of `items`.
pub(crate) fn on_all_cores<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads();
    if threads == 1 || items.len() < 2 {
        return items.iter().map(f).collect();
    }
    let chunk = items.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(&f).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("work on all cores does not panic"))
            .collect()
    })
}

/// `f` on each of `items` in place, on all cores, each thread taking the
/// next item when it is done with one: items of very different sizes (one
/// long session beside many short ones) still keep every core busy.
pub(crate) fn each_on_all_cores<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Sync) {
    let threads = threads().min(items.len());
    if threads <= 1 {
        items.iter_mut().for_each(f);
        return;
    }
    let slots: Vec<Mutex<&mut T>> = items.iter_mut().map(Mutex::new).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while let Some(slot) = slots.get(next.fetch_add(1, Ordering::Relaxed)) {
                    // Each slot is taken by one thread only: never contended.
                    f(&mut slot.lock().unwrap_or_else(|p| p.into_inner()));
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_their_items() {
        let items: Vec<u32> = (0..1000).collect();
        assert_eq!(
            on_all_cores(&items, |i| i * 2),
            (0..1000).map(|i| i * 2).collect::<Vec<_>>()
        );
        let mut items: Vec<u32> = (0..1000).collect();
        each_on_all_cores(&mut items, |i| *i += 1);
        assert_eq!(items, (1..1001).collect::<Vec<_>>());
    }
}
