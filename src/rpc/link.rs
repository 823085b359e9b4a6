//! `qtune rpc link`: a loopback TCP proxy of known rate in front of an RPC worker, so one box
//! with one worker per GPU stands in for two boxes on a 1 or 10 Gbit/s network, without root
//! (no `tc`). Each direction passes through its own token bucket (`rate` bytes per second,
//! `burst` bytes deep, shared by every connection: one link) and, with a delay, a delay line
//! (each chunk leaves `delay` after it arrived; the round trip grows by twice the delay).
//! The proxy counts what it forwarded, per direction, with the time of the first and last
//! byte, so a test (or the GPU script) checks the limit on the proxy's own counters.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The fastest link `rpc link` emulates, Gbit/s (a loopback copy is not much faster).
pub const MAX_GBIT: f64 = 400.0;
/// The longest one-way delay it adds, ms.
pub const MAX_DELAY_MS: f64 = 1000.0;
/// Bytes read from a socket at once.
const CHUNK: usize = 64 << 10;

/// The emulated link: its rate, the bucket's depth and the one-way delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    /// Bytes per second in each direction.
    pub rate_bytes_s: f64,
    /// The most bytes that pass at once after an idle spell.
    pub burst_bytes: u64,
    /// Added to every chunk's trip, one way.
    pub delay: Duration,
}

impl LinkSpec {
    /// From `--gbit` (10^9 bits per second) and `--delay-ms`: the bucket holds 2 ms of the rate
    /// (at least 64 KiB, one read), so a sleep's slack on a busy box does not cut the rate.
    pub fn new(gbit: f64, delay_ms: f64) -> Result<LinkSpec, String> {
        if !(gbit.is_finite() && gbit > 0.0 && gbit <= MAX_GBIT) {
            return Err(format!(
                "--gbit {gbit} is not a link rate: give more than 0 and at most {MAX_GBIT}, e.g. 1 or 10"
            ));
        }
        if !(delay_ms.is_finite() && (0.0..=MAX_DELAY_MS).contains(&delay_ms)) {
            return Err(format!(
                "--delay-ms {delay_ms} is not a delay: give 0 to {MAX_DELAY_MS} ms, e.g. 0.2"
            ));
        }
        let rate_bytes_s = gbit * 1e9 / 8.0;
        Ok(LinkSpec {
            rate_bytes_s,
            burst_bytes: ((rate_bytes_s * 0.002) as u64).max(CHUNK as u64),
            delay: Duration::from_secs_f64(delay_ms / 1e3),
        })
    }
}

/// A token bucket: `take(n)` returns once `n` bytes may pass.
struct Bucket {
    rate: f64,
    burst: f64,
    /// Tokens, and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    fn new(spec: &LinkSpec) -> Bucket {
        Bucket {
            rate: spec.rate_bytes_s,
            burst: spec.burst_bytes as f64,
            state: Mutex::new((spec.burst_bytes as f64, Instant::now())),
        }
    }

    /// Wait until `n` (at most the burst) bytes' tokens are there, and spend them.
    fn take(&self, n: usize) {
        let n = (n as f64).min(self.burst);
        loop {
            let wait = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * self.rate).min(self.burst);
                s.1 = now;
                if s.0 >= n {
                    s.0 -= n;
                    return;
                }
                (n - s.0) / self.rate
            };
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
    }
}

/// What one direction forwarded.
#[derive(Default)]
struct Flow {
    bytes: AtomicU64,
    /// Microseconds since the proxy started, of the first and the last byte forwarded (+1,
    /// so 0 means none yet).
    first_us: AtomicU64,
    last_us: AtomicU64,
}

impl Flow {
    fn add(&self, n: usize, since: Instant) {
        let t = since.elapsed().as_micros() as u64 + 1;
        let _ = self
            .first_us
            .compare_exchange(0, t, Ordering::SeqCst, Ordering::SeqCst);
        self.bytes.fetch_add(n as u64, Ordering::SeqCst);
        self.last_us.fetch_max(t, Ordering::SeqCst);
    }

    fn stats(&self) -> FlowStats {
        let (a, b) = (
            self.first_us.load(Ordering::SeqCst),
            self.last_us.load(Ordering::SeqCst),
        );
        FlowStats {
            bytes: self.bytes.load(Ordering::SeqCst),
            active_s: if a == 0 { 0.0 } else { (b - a) as f64 / 1e6 },
        }
    }
}

/// One direction's counters as `--stats` writes them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowStats {
    /// Bytes forwarded.
    pub bytes: u64,
    /// Seconds from the first byte forwarded to the last.
    pub active_s: f64,
}

impl FlowStats {
    /// Whether the bucket held: no more than the burst plus the rate over the active time.
    pub fn within(&self, rate_bytes_s: f64, burst_bytes: u64) -> bool {
        self.bytes as f64 <= burst_bytes as f64 + rate_bytes_s * self.active_s
    }
}

/// The proxy's counters (`--stats FILE`, rewritten every 200 ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkStats {
    pub rate_bytes_s: f64,
    pub burst_bytes: u64,
    pub delay_ms: f64,
    pub connections: u64,
    /// Head to worker.
    pub to_worker: FlowStats,
    /// Worker to head.
    pub to_head: FlowStats,
}

/// The running proxy's shared state.
struct Link {
    spec: LinkSpec,
    start: Instant,
    up: (Bucket, Flow),
    down: (Bucket, Flow),
    connections: AtomicU64,
}

impl Link {
    fn stats(&self) -> LinkStats {
        LinkStats {
            rate_bytes_s: self.spec.rate_bytes_s,
            burst_bytes: self.spec.burst_bytes,
            delay_ms: self.spec.delay.as_secs_f64() * 1e3,
            connections: self.connections.load(Ordering::SeqCst),
            to_worker: self.up.1.stats(),
            to_head: self.down.1.stats(),
        }
    }
}

/// Forward `from` to `to` through one direction's bucket and delay line: a reader thread
/// stamps each chunk, this thread sends it on once its delay is over and its tokens are
/// there. The channel holds at most the chunks of the delay at the rate (plus a few), so a
/// slow link pushes back on the sender as a real one does.
fn pump(mut from: TcpStream, mut to: TcpStream, dir: &(Bucket, Flow), link: &Link) {
    let in_flight = (link.spec.rate_bytes_s * link.spec.delay.as_secs_f64()) as usize / CHUNK;
    let (tx, rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(in_flight + 4);
    let from_too = from.try_clone().ok();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let burst = link.spec.burst_bytes as usize;
        let mut broken = false;
        'chunks: for (at, chunk) in rx {
            let due = at + link.spec.delay;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            for piece in chunk.chunks(burst) {
                dir.0.take(piece.len());
                if to.write_all(piece).is_err() {
                    broken = true;
                    break 'chunks;
                }
                dir.1.add(piece.len(), link.start);
            }
        }
        // The end goes on as a half-close; a side that broke closes both sides whole (the
        // reader, blocked on its socket, sees its end).
        if broken {
            let _ = to.shutdown(Shutdown::Both);
            if let Some(f) = &from_too {
                let _ = f.shutdown(Shutdown::Both);
            }
        } else {
            let _ = to.shutdown(Shutdown::Write);
        }
    });
}

fn serve_one(head: TcpStream, to: &str, link: &Link) -> Result<(), String> {
    let worker =
        TcpStream::connect(to).map_err(|e| format!("cannot reach the worker at {to}: {e}"))?;
    head.set_nodelay(true).ok();
    worker.set_nodelay(true).ok();
    let (h2, w2) = (
        head.try_clone().map_err(|e| e.to_string())?,
        worker.try_clone().map_err(|e| e.to_string())?,
    );
    std::thread::scope(|s| {
        s.spawn(|| pump(head, worker, &link.up, link));
        s.spawn(|| pump(w2, h2, &link.down, link));
    });
    Ok(())
}

/// Accept on `listener` forever, forwarding each connection to `to` through the link;
/// `stats` is rewritten every 200 ms with the counters.
pub fn run(
    listener: TcpListener,
    to: String,
    spec: LinkSpec,
    stats: Option<std::path::PathBuf>,
) -> Result<(), String> {
    let link = Arc::new(Link {
        spec,
        start: Instant::now(),
        up: (Bucket::new(&spec), Flow::default()),
        down: (Bucket::new(&spec), Flow::default()),
        connections: AtomicU64::new(0),
    });
    if let Some(path) = stats {
        let link = link.clone();
        std::thread::spawn(move || loop {
            if let Ok(j) = serde_json::to_string_pretty(&link.stats()) {
                let tmp = path.with_extension("tmp");
                if std::fs::write(&tmp, j).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        });
    }
    for conn in listener.incoming() {
        let head = match conn {
            Ok(c) => c,
            Err(e) => return Err(format!("accept: {e}")),
        };
        link.connections.fetch_add(1, Ordering::SeqCst);
        let (link, to) = (link.clone(), to.clone());
        std::thread::spawn(move || {
            if let Err(e) = serve_one(head, &to, &link) {
                eprintln!("qtune: rpc link: {e}");
            }
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_gbit_over_eight_and_the_bucket_two_ms_of_it() {
        let s = LinkSpec::new(1.0, 0.2).unwrap();
        assert_eq!(s.rate_bytes_s, 125e6);
        assert_eq!(s.burst_bytes, 250_000);
        assert_eq!(s.delay, Duration::from_micros(200));
        // A slow link's bucket is one read deep.
        assert_eq!(LinkSpec::new(0.05, 0.0).unwrap().burst_bytes, 64 << 10);
        for (g, d) in [
            (0.0, 0.0),
            (-1.0, 0.0),
            (f64::NAN, 0.0),
            (1e4, 0.0),
            (1.0, -1.0),
        ] {
            assert!(LinkSpec::new(g, d).is_err(), "{g} {d}");
        }
    }

    #[test]
    fn a_bucket_passes_no_more_than_its_burst_plus_the_rate() {
        // 4 MB/s, 64 KiB deep: 1 MB takes about 0.23 s, never less than (1 MB - burst) / rate.
        let spec = LinkSpec {
            rate_bytes_s: 4e6,
            burst_bytes: 64 << 10,
            delay: Duration::ZERO,
        };
        let b = Bucket::new(&spec);
        let t = Instant::now();
        let mut sent = 0usize;
        while sent < 1_000_000 {
            b.take(CHUNK);
            sent += CHUNK;
        }
        let floor = (sent as f64 - (64 << 10) as f64) / 4e6;
        assert!(
            t.elapsed().as_secs_f64() >= floor * 0.99,
            "{:?}",
            t.elapsed()
        );
        let f = FlowStats {
            bytes: sent as u64,
            active_s: t.elapsed().as_secs_f64(),
        };
        assert!(f.within(spec.rate_bytes_s, spec.burst_bytes));
        assert!(!FlowStats {
            bytes: 10_000_000,
            active_s: 1.0
        }
        .within(4e6, 64 << 10));
    }
}
