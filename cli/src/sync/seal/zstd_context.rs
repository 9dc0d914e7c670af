//! One zstd context per thread for compressing and one for decompressing,
//! kept from one segment or blob to the next.
//!
//! A fresh context for level 3 is about 1.3 MB of tables and window, each
//! allocation big enough to be mapped on its own (see `crate::malloc`) and
//! zeroed by the kernel page by page. A first push of the bench home seals
//! about 2,500 segments and blobs: a context for each made 730,000 page
//! faults and 1.4 s of system time; reused, 80,000 and 0.44 s.

use std::cell::RefCell;
use std::io::{self, BufRead, Write};

use zstd::stream::read::Decoder;
use zstd::stream::write::Encoder;
use zstd::zstd_safe::{CCtx, CParameter, DCtx, DParameter, ResetDirective};

thread_local! {
    static CONTEXT: RefCell<Option<CCtx<'static>>> = const { RefCell::new(None) };
    static DCONTEXT: RefCell<Option<DCtx<'static>>> = const { RefCell::new(None) };
}

fn zstd_error(code: usize) -> io::Error {
    io::Error::other(zstd::zstd_safe::get_error_name(code))
}

/// Hands `read` a decoder of the zstd frame `input` holds, with this
/// thread's context, refusing windows past 2^`window_log_max`.
pub fn decompress_from<R: BufRead, T>(
    input: R,
    window_log_max: u32,
    read: impl FnOnce(Decoder<'_, R>) -> T,
) -> io::Result<T> {
    DCONTEXT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let ctx = slot.get_or_insert_with(DCtx::create);
            // A frame left half read (a refused segment, or a reader that
            // stopped at its last byte) keeps the context mid-session,
            // where parameters cannot be set.
            ctx.reset(ResetDirective::SessionOnly).map_err(zstd_error)?;
            ctx.set_parameter(DParameter::WindowLogMax(window_log_max))
                .map_err(zstd_error)?;
            Ok(read(Decoder::with_context(input, ctx)))
        }
        Err(_) => {
            let mut d = Decoder::with_buffer(input)?;
            d.window_log_max(window_log_max)?;
            Ok(read(d))
        }
    })
}

/// Compresses what `write` writes into `out` as one zstd frame at `level`
/// with a window of 2^`window_log` bytes (0: the level's own), with this
/// thread's context, and hands back `out` and what `write` returned. (A
/// call made while the context is in use, which nothing does today, gets a
/// context of its own.)
pub fn compress_into<W: Write, T>(
    out: W,
    level: i32,
    window_log: u32,
    write: impl FnOnce(&mut Encoder<'_, W>) -> io::Result<T>,
) -> io::Result<(W, T)> {
    let run = |mut enc: Encoder<'_, W>| -> io::Result<(W, T)> {
        let t = write(&mut enc)?;
        Ok((enc.finish()?, t))
    };
    CONTEXT.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            let ctx = slot.get_or_insert_with(CCtx::create);
            ctx.reset(ResetDirective::SessionOnly).map_err(zstd_error)?;
            ctx.set_parameter(CParameter::CompressionLevel(level))
                .map_err(zstd_error)?;
            // Set every time: a session reset keeps the last call's.
            ctx.set_parameter(CParameter::WindowLog(window_log))
                .map_err(zstd_error)?;
            run(Encoder::with_context(out, ctx))
        }
        Err(_) => {
            let mut enc = Encoder::new(out, level)?;
            enc.window_log(window_log)?;
            run(enc)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_from_a_reused_context_each_decode_alone() {
        let a = b"first frame ".repeat(1000);
        let b = b"second, different frame ".repeat(500);
        let (fa, _) = compress_into(Vec::new(), 3, 0, |w| w.write_all(&a)).unwrap();
        let (fb, _) = compress_into(Vec::new(), 3, 0, |w| w.write_all(&b)).unwrap();
        assert_eq!(zstd::decode_all(&fa[..]).unwrap(), a);
        assert_eq!(zstd::decode_all(&fb[..]).unwrap(), b);
        assert!(fb.len() < b.len() / 10);
        // A frame abandoned half way leaves nothing in the next one.
        let _ = compress_into(Vec::new(), 3, 0, |w| {
            w.write_all(&a)?;
            Err::<(), _>(io::Error::other("stop"))
        });
        let (fc, _) = compress_into(Vec::new(), 3, 0, |w| w.write_all(&b)).unwrap();
        assert_eq!(zstd::decode_all(&fc[..]).unwrap(), b);
        // Decoded through the reused context: whole, half (a reader that
        // stops early), then whole again.
        let decode = |frame: &[u8], upto: usize| {
            let mut got = vec![0; upto];
            decompress_from(frame, 24, |mut d| io::Read::read_exact(&mut d, &mut got))
                .unwrap()
                .unwrap();
            got
        };
        assert_eq!(decode(&fa, a.len()), a);
        assert_eq!(decode(&fb, 10), b[..10]);
        assert_eq!(decode(&fb, b.len()), b);
        assert_eq!(decode(&fa, a.len()), a);
    }
}
