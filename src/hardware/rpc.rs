//! A worker seen from the head, over llama.cpp's own RPC protocol (ggml-rpc.cpp, protocol
//! 7.x of the pinned build): its devices and their memory, the link's latency (TCP connect
//! and one protocol round trip) and its bandwidth (a 32 MiB buffer written through the
//! protocol: allocate, write, free, exactly what the head does when it loads weights).
//!
//! Message shapes: request `| cmd u8 | size u64 | payload |`, response `| size u64 |
//! payload |`, little-endian, packed structs. The first command must be HELLO.

use crate::config::rpc::Worker;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const CMD_ALLOC_BUFFER: u8 = 0;
const CMD_BUFFER_GET_BASE: u8 = 3;
const CMD_FREE_BUFFER: u8 = 4;
const CMD_SET_TENSOR: u8 = 6;
const CMD_GET_DEVICE_MEMORY: u8 = 11;
const CMD_HELLO: u8 = 14;
const CMD_DEVICE_COUNT: u8 = 15;
/// `RPC_CONN_CAPS_SIZE` (transport.h): all zero asks for plain TCP.
const CONN_CAPS: usize = 24;
/// The protocol major version of the pinned build (`RPC_PROTO_MAJOR_VERSION`).
pub const PROTO_MAJOR: u8 = 7;
/// `sizeof(rpc_tensor)`, packed: id, type, buffer, ne[4], nb[4], op, op_params[16], flags,
/// src[10], view_src, view_offs, data, name[64], use_count.
const RPC_TENSOR_SIZE: usize = 8 + 4 + 8 + 16 + 16 + 4 + 64 + 4 + 80 + 8 + 8 + 8 + 64 + 4;
/// Bytes written per bandwidth sample.
const BANDWIDTH_BYTES: usize = 32 << 20;
/// The longest one answer may take to arrive whole, from its request sent: a worker that
/// never answers, or drips its answer a byte at a time, costs this, not forever.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(30);
/// The longest measuring one worker may take in all (its three 32 MiB writes included: a
/// link under about 1 MB/s is no place for weights anyway).
pub const MEASURE_LIMIT: Duration = Duration::from_secs(120);
/// The most devices a worker may report: an rpc-server serves the devices of one box.
pub const MAX_DEVICES: u32 = 64;
/// The most memory one device may report, bytes (64 TiB: past any GPU or host of today).
pub const MAX_DEVICE_BYTES: u64 = 64 << 40;

/// One device of a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerDevice {
    /// As `-ot` rules name it on the head, e.g. `RPC0[192.168.1.20:50052]` (the worker's
    /// device 0; `--list-devices` numbers every worker's devices in one row, `RPC0`, `RPC1`).
    pub name: String,
    pub total_mib: u64,
    pub free_mib: u64,
}

/// A worker as `qtune hw --rpc` measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// `host:port`.
    pub address: String,
    /// The worker's protocol version, e.g. "7.0.0".
    pub protocol: String,
    pub devices: Vec<WorkerDevice>,
    /// Median time to open a TCP connection to it, ms (5 tries).
    pub connect_ms: f64,
    /// Median time of one protocol round trip (a device-memory query), ms (5 tries).
    pub round_trip_ms: f64,
    /// Best of 3 writes of 32 MiB through the protocol into a buffer on its first device,
    /// MB/s (10^6 bytes per second), the round trip subtracted.
    pub write_mb_s: f64,
}

/// The `--rpc` list of measured workers, in their order.
pub fn addresses(workers: &[WorkerInfo]) -> Vec<String> {
    workers.iter().map(|w| w.address.clone()).collect()
}

/// The head's devices for [`placements`]: the workers' (measured) devices, and the local GPUs.
pub fn head_devices(workers: &[WorkerInfo], local_gpus: usize) -> HeadDevices {
    HeadDevices {
        remote: workers
            .iter()
            .flat_map(|w| w.devices.iter().map(|d| (d.name.clone(), Some(d.free_mib))))
            .collect(),
        local_gpus,
    }
}

/// The head's devices in llama.cpp's order: every worker's devices first (in `--rpc` order),
/// then the local GPUs; `-ts` proportions follow this order.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadDevices {
    /// The workers' devices (`RPCn[host:port]`), with their free memory, MiB, where known.
    pub remote: Vec<(String, Option<u64>)>,
    /// How many local GPUs the head has.
    pub local_gpus: usize,
}

/// A connection that has said HELLO.
struct Conn {
    sock: TcpStream,
    /// No read or write waits past this ([`MEASURE_LIMIT`] from the connection's opening).
    deadline: Instant,
}

/// The error of a read or write that ran past its time.
fn late(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what.to_string())
}

fn io_err(w: &Worker, what: &str, e: std::io::Error) -> String {
    format!("worker {w}: {what}: {e}")
}

/// Open a TCP connection (3 s at most).
pub fn connect(w: &Worker) -> Result<TcpStream, String> {
    let addrs: Vec<_> = (w.host.as_str(), w.port)
        .to_socket_addrs()
        .map_err(|e| format!("worker {w}: cannot resolve {}: {e}", w.host))?
        .collect();
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(3)) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => format!(
            "worker {w} is not reachable ({e}); is 'qtune rpc serve' running there, and does a firewall let the port through?"
        ),
        None => format!("worker {w}: {} resolves to no address", w.host),
    })
}

/// Whether a worker accepts a TCP connection now (how a dead worker is told apart).
pub fn reachable(w: &Worker) -> bool {
    connect(w).is_ok()
}

impl Conn {
    fn open(w: &Worker) -> Result<(Conn, String), String> {
        let sock = connect(w)?;
        sock.set_nodelay(true).ok();
        let mut c = Conn {
            sock,
            deadline: Instant::now() + MEASURE_LIMIT,
        };
        c.send(CMD_HELLO, &[0u8; CONN_CAPS])
            .map_err(|e| io_err(w, "HELLO", e))?;
        let rsp = c.recv().map_err(|e| {
            io_err(
                w,
                "no answer to HELLO (busy serving another head, or not an rpc-server?)",
                e,
            )
        })?;
        if rsp.len() != 4 + CONN_CAPS {
            return Err(format!(
                "worker {w} answered HELLO with {} bytes: not the pinned build's RPC protocol",
                rsp.len()
            ));
        }
        let version = format!("{}.{}.{}", rsp[0], rsp[1], rsp[2]);
        if rsp[0] != PROTO_MAJOR {
            return Err(format!(
                "worker {w} speaks RPC protocol {version}, the pinned build {PROTO_MAJOR}.x: run the same llama.cpp build on both boxes ('qtune server build' there)"
            ));
        }
        Ok((c, version))
    }

    /// The time left before `by`, or the error that says it is spent.
    fn left(by: Instant, what: &str) -> std::io::Result<Duration> {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late(what));
        }
        Ok(left)
    }

    /// `write_all`, but never past the connection's deadline (a worker that reads a byte a
    /// minute cannot hold the head).
    fn write_all_by(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        let what = format!(
            "it did not take the request within {} s",
            MEASURE_LIMIT.as_secs()
        );
        while !buf.is_empty() {
            let left = Self::left(self.deadline, &what)?;
            self.sock.set_write_timeout(Some(left))?;
            match self.sock.write(buf) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(late(&what)),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `read_exact`, but never past `by`: a worker that never answers, or drips its answer,
    /// is cut off then.
    fn read_exact_by(&mut self, buf: &mut [u8], by: Instant) -> std::io::Result<()> {
        let what = format!("no whole answer within {} s", ANSWER_LIMIT.as_secs());
        let mut got = 0;
        while got < buf.len() {
            let left = Self::left(by, &what)?;
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "it closed the connection",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => return Err(late(&what)),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn send(&mut self, cmd: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(9);
        head.push(cmd);
        head.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        self.write_all_by(&head)?;
        self.write_all_by(payload)?;
        self.sock.flush()
    }

    /// One answer, whole within [`ANSWER_LIMIT`] (and the connection's deadline).
    fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let by = (Instant::now() + ANSWER_LIMIT).min(self.deadline);
        let mut size = [0u8; 8];
        self.read_exact_by(&mut size, by)?;
        let size = u64::from_le_bytes(size);
        if size > 1 << 20 {
            return Err(std::io::Error::other(format!(
                "a {size}-byte answer is not one the protocol sends"
            )));
        }
        let mut buf = vec![0u8; size as usize];
        self.read_exact_by(&mut buf, by)?;
        Ok(buf)
    }

    fn call(&mut self, cmd: u8, payload: &[u8], want: usize) -> std::io::Result<Vec<u8>> {
        self.send(cmd, payload)?;
        let r = self.recv()?;
        if r.len() != want {
            return Err(std::io::Error::other(format!(
                "answer of {} bytes, expected {want}",
                r.len()
            )));
        }
        Ok(r)
    }

    fn device_memory(&mut self, device: u32) -> std::io::Result<(u64, u64)> {
        let r = self.call(CMD_GET_DEVICE_MEMORY, &device.to_le_bytes(), 16)?;
        Ok((u64_at(&r, 0), u64_at(&r, 8)))
    }

    /// Write `bytes` into a fresh buffer on device 0 and free it; the time from the first
    /// byte sent to the answer of the round trip that follows the write, s.
    fn timed_write(&mut self, bytes: usize) -> std::io::Result<f64> {
        let mut req = Vec::new();
        req.extend_from_slice(&0u32.to_le_bytes());
        req.extend_from_slice(&(bytes as u64).to_le_bytes());
        let r = self.call(CMD_ALLOC_BUFFER, &req, 16)?;
        let (ptr, size) = (u64_at(&r, 0), u64_at(&r, 8));
        if ptr == 0 || size < bytes as u64 {
            return Err(std::io::Error::other(
                "the worker could not allocate 32 MiB",
            ));
        }
        let base = u64_at(&self.call(CMD_BUFFER_GET_BASE, &ptr.to_le_bytes(), 8)?, 0);
        // An F32 tensor of bytes/4 elements at the buffer's base.
        let mut t = vec![0u8; RPC_TENSOR_SIZE];
        let put32 =
            |t: &mut Vec<u8>, at: usize, v: u32| t[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |t: &mut Vec<u8>, at: usize, v: u64| t[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put64(&mut t, 0, 1); // id
        put32(&mut t, 8, 0); // type F32
        put64(&mut t, 12, ptr); // buffer
        let n = (bytes / 4) as u32;
        for (i, v) in [n, 1, 1, 1].into_iter().enumerate() {
            put32(&mut t, 20 + 4 * i, v); // ne
        }
        for (i, v) in [4, bytes as u32, bytes as u32, bytes as u32]
            .into_iter()
            .enumerate()
        {
            put32(&mut t, 36 + 4 * i, v); // nb
        }
        // data: after id, type, buffer, ne, nb, op, op_params, flags, src, view_src, view_offs.
        let data_at = 8 + 4 + 8 + 16 + 16 + 4 + 64 + 4 + 80 + 8 + 8;
        put64(&mut t, data_at, base);
        let mut payload = t;
        payload.push(0); // no cache
        payload.extend_from_slice(&0u64.to_le_bytes()); // offset
        payload.resize(payload.len() + bytes, 0x5a);
        let start = Instant::now();
        self.send(CMD_SET_TENSOR, &payload)?;
        // SET_TENSOR has no answer: the round trip after it ends when the write is done.
        self.device_memory(0)?;
        let s = start.elapsed().as_secs_f64();
        self.send(CMD_FREE_BUFFER, &ptr.to_le_bytes())?;
        Ok(s)
    }
}

/// Whether a socket error is its timeout running out (`WouldBlock` on Unix, `TimedOut` on
/// Windows).
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The median of the measurements (5 each: the middle one), NaN for none.
fn median(v: Vec<f64>) -> f64 {
    crate::objective::median(&v).unwrap_or(f64::NAN)
}

/// Measure one worker: devices, memory, latency and write bandwidth.
pub fn measure(w: &Worker) -> Result<WorkerInfo, String> {
    let mut connects = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        drop(connect(w)?);
        connects.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (mut c, protocol) = Conn::open(w)?;
    let r = c
        .call(CMD_DEVICE_COUNT, &[], 4)
        .map_err(|e| io_err(w, "device count", e))?;
    let count = u32::from_le_bytes(r[..4].try_into().expect("4 bytes"));
    if count > MAX_DEVICES {
        return Err(format!(
            "worker {w} says it has {count} devices, past the {MAX_DEVICES} an rpc-server serves: not the pinned build's rpc-server? (start it with 'qtune rpc serve')"
        ));
    }
    let mut devices = Vec::new();
    for d in 0..count {
        let (free, total) = c
            .device_memory(d)
            .map_err(|e| io_err(w, "device memory", e))?;
        if total > MAX_DEVICE_BYTES || free > total {
            return Err(format!(
                "worker {w} says its device {d} has {free} bytes free of {total}: no device's memory (free past total, or total past {} TiB); not the pinned build's rpc-server? (start it with 'qtune rpc serve')",
                MAX_DEVICE_BYTES >> 40
            ));
        }
        devices.push(WorkerDevice {
            name: crate::config::rpc::device_name(w, d),
            total_mib: total >> 20,
            free_mib: free >> 20,
        });
    }
    // The round trips and the link speed are measured one worker at a time (the workers are
    // probed at once, and share the head's link): what each measures is its own.
    static LINK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _link = LINK.lock().unwrap_or_else(|e| e.into_inner());
    let mut trips = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        c.device_memory(0).map_err(|e| io_err(w, "round trip", e))?;
        trips.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let round_trip_ms = median(trips);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let s = c
            .timed_write(BANDWIDTH_BYTES)
            .map_err(|e| io_err(w, "bandwidth write", e))?;
        best = best.min(s);
    }
    // The round trip after the write is part of its time; subtracted only where it is a small
    // part (a worker slow to answer the round trips alone, then quick after a write, made
    // best - round trip 0: "write 33554432 MB/s").
    let rtt_s = round_trip_ms / 1e3;
    let secs = if best > 2.0 * rtt_s {
        best - rtt_s
    } else {
        best
    }
    .max(1e-6);
    Ok(WorkerInfo {
        address: w.to_string(),
        protocol,
        devices,
        connect_ms: median(connects),
        round_trip_ms,
        write_mb_s: BANDWIDTH_BYTES as f64 / secs / 1e6,
    })
}

/// Text for `qtune hw`, one block per worker.
pub fn render(workers: &[Result<WorkerInfo, String>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for w in workers {
        match w {
            Ok(w) => {
                let _ = writeln!(
                    out,
                    "RPC worker {} (protocol {}): connect {:.2} ms, round trip {:.2} ms, write {:.0} MB/s (32 MiB through the RPC protocol)",
                    w.address, w.protocol, w.connect_ms, w.round_trip_ms, w.write_mb_s
                );
                for d in &w.devices {
                    let _ = writeln!(
                        out,
                        "  {}: {} total, {} free",
                        d.name,
                        crate::util::fmt_mib(d.total_mib as f64),
                        crate::util::fmt_mib(d.free_mib as f64)
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "RPC worker: {e}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tensor_header_is_the_packed_size_of_the_pinned_build() {
        assert_eq!(RPC_TENSOR_SIZE, 296);
        assert_eq!(RPC_TENSOR_SIZE % 8, 0);
    }

    #[test]
    fn an_unreachable_worker_says_what_to_check() {
        // A port nothing listens on: bind one, learn it, close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let w = Worker {
            host: "127.0.0.1".into(),
            port,
        };
        let e = measure(&w).unwrap_err();
        assert!(
            e.contains("not reachable") && e.contains("qtune rpc serve"),
            "{e}"
        );
        assert!(!reachable(&w));
    }
}
