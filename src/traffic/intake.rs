//! What the recording proxy ([`super::proxy`]) takes in from its clients, bounded so that no
//! mix of clients freezes it (issue 53):
//! - a request body holds room for the bytes that arrived, taken as they arrive (never for
//!   the length it declares), out of [`Room`]; a body that finds no room waits for it only
//!   until its read deadline, and a small body (or none) never waits behind a large one;
//! - a body must keep coming: [`Limits::body_idle`] without a byte, or an average under
//!   [`MIN_BODY_RATE`] after that, and it is answered 408;
//! - at most [`Limits::per_client`] connections from one address (more are answered 503 and
//!   closed at once), and a connection that sends no complete request head within
//!   [`Limits::header_idle`] is closed.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slowest a body may come, on average, once its first [`Limits::body_idle`] is over.
pub const MIN_BODY_RATE: usize = 64 << 10;

/// The bounds on what clients may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a body may go without a byte (and its first bytes may take).
    pub body_idle: Duration,
    /// How long a connection may take to send a request head, or stay idle between two.
    pub header_idle: Duration,
    /// The most connections from one client address at once.
    pub per_client: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_idle: Duration::from_secs(30),
            header_idle: Duration::from_secs(15),
            per_client: 128,
        }
    }
}

/// Why a body was not taken in.
#[derive(Debug)]
pub enum BodyError {
    /// Over the largest body forwarded, or over all the room there is.
    TooLarge,
    /// It stopped coming, or came too slowly.
    TimedOut,
    /// No room for it before its deadline (the room is full of bodies that arrived).
    NoRoom,
    Broken(String),
}

/// A body's size in the KiB units of the room.
fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

/// The room for request bodies, all connections together, in KiB: the main room, and a
/// sixteenth of it more for small bodies (up to a 256th of it each) when the main one is
/// full, so that small requests never queue behind large ones.
pub struct Room {
    main: Arc<Semaphore>,
    main_total: usize,
    small: Arc<Semaphore>,
    small_body: usize,
}

impl Room {
    pub fn new(bytes: usize) -> Room {
        let main_total = kib(bytes).max(1);
        Room {
            main: Arc::new(Semaphore::new(main_total)),
            main_total,
            small: Arc::new(Semaphore::new((main_total / 16).max(1))),
            small_body: bytes / 256,
        }
    }
}

/// The room one body holds, given back when it is dropped.
#[derive(Default)]
pub struct Held {
    main: Option<OwnedSemaphorePermit>,
    small: Option<OwnedSemaphorePermit>,
}

impl Held {
    fn kib(&self) -> usize {
        self.main.as_ref().map_or(0, |p| p.num_permits())
            + self.small.as_ref().map_or(0, |p| p.num_permits())
    }

    fn add(slot: &mut Option<OwnedSemaphorePermit>, p: OwnedSemaphorePermit) {
        match slot {
            Some(s) => s.merge(p),
            None => *slot = Some(p),
        }
    }

    /// Hold room for `bytes` in all, waiting for it until `until` at most.
    async fn grow(&mut self, room: &Room, bytes: usize, until: Instant) -> Result<(), BodyError> {
        let want = kib(bytes);
        let have = self.kib();
        if want <= have {
            return Ok(());
        }
        if want > room.main_total {
            return Err(BodyError::TooLarge);
        }
        let need = (want - have) as u32;
        // Room that is free now is taken at once (never queued for).
        if let Ok(p) = room.main.clone().try_acquire_many_owned(need) {
            Self::add(&mut self.main, p);
            return Ok(());
        }
        let small = bytes <= room.small_body;
        let wait = if small {
            room.small.clone().acquire_many_owned(need)
        } else {
            room.main.clone().acquire_many_owned(need)
        };
        match tokio::time::timeout_at(until.into(), wait).await {
            Ok(Ok(p)) if small => Self::add(&mut self.small, p),
            Ok(Ok(p)) => Self::add(&mut self.main, p),
            Ok(Err(_)) | Err(_) => return Err(BodyError::NoRoom),
        }
        Ok(())
    }
}

/// Read a request body of at most `max` bytes, holding room for what arrived: the body and
/// its room (to be kept as long as the body is).
pub async fn read_body(
    mut body: Incoming,
    room: &Room,
    limits: &Limits,
    max: usize,
) -> Result<(Bytes, Held), BodyError> {
    let started = Instant::now();
    let mut held = Held::default();
    let mut parts: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    loop {
        // The deadline moves with what arrived: MIN_BODY_RATE on average after body_idle.
        let until =
            started + limits.body_idle + Duration::from_secs_f64(len as f64 / MIN_BODY_RATE as f64);
        let next = (Instant::now() + limits.body_idle).min(until);
        let frame = match tokio::time::timeout_at(next.into(), body.frame()).await {
            Err(_) => return Err(BodyError::TimedOut),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if len + data.len() > max {
            return Err(BodyError::TooLarge);
        }
        held.grow(room, len + data.len(), until).await?;
        len += data.len();
        parts.push(data);
    }
    let body = match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut all = Vec::with_capacity(len);
            for p in parts {
                all.extend_from_slice(&p);
            }
            Bytes::from(all)
        }
    };
    Ok((body, held))
}

/// Connections kept for light clients: once all but this many of the recorder's connections
/// are open, only an address holding fewer than [`LIGHT`] gets one more. An agent holds a few
/// connections; four addresses at the per-address cap (4 x 128 = 512) used to fill them all
/// and leave a real client waiting (issue 53).
pub const RESERVED: usize = 64;
/// An address holding fewer connections than this may take a reserved one.
pub const LIGHT: usize = 8;

/// The connections open from each client address, and in all.
#[derive(Clone, Default)]
pub struct Clients(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its address has this many open already.
    Client(usize),
    /// The recorder has this many open (the reserve too, or the address is not light).
    Full(usize),
}

/// One connection counted against its address, until dropped.
pub struct Counted {
    clients: Clients,
    ip: IpAddr,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut m = self.clients.0.lock().unwrap();
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl Clients {
    /// Count one more connection from `ip`: refused when it has `cap` open already, or when
    /// `total` are open in all, or `total - RESERVED` and `ip` is not light.
    pub fn admit(&self, ip: IpAddr, cap: usize, total: usize) -> Result<Counted, Refused> {
        let mut m = self.0.lock().unwrap();
        let open: usize = m.values().sum();
        let n = m.get(&ip).copied().unwrap_or(0);
        if n >= cap {
            return Err(Refused::Client(n));
        }
        if open >= total || (open >= total.saturating_sub(RESERVED) && n >= LIGHT) {
            return Err(Refused::Full(open));
        }
        *m.entry(ip).or_insert(0) += 1;
        Ok(Counted {
            clients: self.clone(),
            ip,
        })
    }
}

/// Answer a connection that was not admitted 503 and close it (a second at most).
pub async fn refuse(mut stream: tokio::net::TcpStream, why: Refused) {
    use tokio::io::AsyncWriteExt;
    let what = match why {
        Refused::Client(n) => format!("this client has {n} connections open already"),
        Refused::Full(n) => format!("{n} connections are open already"),
    };
    let body = format!(
        "{{\"error\":{{\"code\":503,\"message\":\"qtune record: {what}\",\
         \"type\":\"qtune_record_error\"}}}}"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Room is taken as bytes arrive: sixteen bodies of one byte hold 16 KiB, and the rest of
    /// the room is free at once for another.
    #[tokio::test]
    async fn room_is_held_for_what_arrived_and_small_bodies_never_queue() {
        let room = Room::new(1 << 20);
        let until = Instant::now() + Duration::from_secs(5);
        let mut stalled = Vec::new();
        for _ in 0..16 {
            let mut h = Held::default();
            h.grow(&room, 1, until).await.unwrap();
            stalled.push(h);
        }
        assert_eq!(room.main.available_permits(), 1024 - 16);
        // The main room filled by what arrived: a large body waits (until its deadline), a
        // small one takes the small room at once.
        let mut big = Held::default();
        big.grow(&room, 1008 << 10, until).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(200);
        assert!(matches!(
            Held::default().grow(&room, 200 << 10, soon).await,
            Err(BodyError::NoRoom)
        ));
        let mut small = Held::default();
        small.grow(&room, 2 << 10, soon).await.unwrap();
        assert_eq!(small.kib(), 2);
        assert!(small.main.is_none(), "the small body took the small room");
        assert!(matches!(
            Held::default().grow(&room, 2 << 20, until).await,
            Err(BodyError::TooLarge)
        ));
        drop(big);
        drop(stalled);
        drop(small);
        assert_eq!(room.main.available_permits(), 1024);
    }

    #[test]
    fn connections_are_capped_per_address() {
        let c = Clients::default();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let held: Vec<Counted> = (0..3).map(|_| c.admit(a, 3, 512).unwrap()).collect();
        assert_eq!(c.admit(a, 3, 512).err(), Some(Refused::Client(3)));
        assert!(c.admit(b, 3, 512).is_ok());
        drop(held);
        assert!(c.admit(a, 3, 512).is_ok());
        assert!(
            c.0.lock().unwrap().is_empty(),
            "every connection is uncounted"
        );
    }

    /// Four addresses at the per-address cap fill what is not reserved; a fifth, light
    /// address still gets in, and the heavy ones get no reserved connection.
    #[test]
    fn heavy_addresses_never_take_the_reserve_of_light_ones() {
        let c = Clients::default();
        let ip = |i: u8| -> IpAddr { std::net::Ipv4Addr::new(127, 0, 0, i).into() };
        let mut held = Vec::new();
        let mut refused = 0;
        for i in 2..6 {
            for _ in 0..128 {
                match c.admit(ip(i), 128, 512) {
                    Ok(k) => held.push(k),
                    Err(_) => refused += 1,
                }
            }
        }
        assert_eq!(held.len(), 512 - RESERVED);
        assert_eq!(refused, RESERVED);
        assert_eq!(c.admit(ip(5), 128, 512).err(), Some(Refused::Full(448)));
        // A light client: its LIGHT connections, then no more of the reserve.
        for _ in 0..LIGHT {
            held.push(c.admit(ip(9), 128, 512).expect("a light client gets in"));
        }
        assert!(c.admit(ip(9), 128, 512).is_err());
        // Light clients together stop at the total.
        for i in 10..40 {
            while let Ok(k) = c.admit(ip(i), 128, 512) {
                held.push(k);
            }
        }
        assert_eq!(held.len(), 512);
        assert_eq!(c.admit(ip(200), 128, 512).err(), Some(Refused::Full(512)));
    }
}
