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

/// The connections open from each client address.
#[derive(Clone, Default)]
pub struct Clients(Arc<Mutex<HashMap<IpAddr, usize>>>);

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
    /// Count one more connection from `ip`; None when it has `cap` already.
    pub fn admit(&self, ip: IpAddr, cap: usize) -> Option<Counted> {
        let mut m = self.0.lock().unwrap();
        let n = m.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Counted {
            clients: self.clone(),
            ip,
        })
    }
}

/// Answer a connection over its address's cap 503 and close it (a second at most).
pub async fn refuse(mut stream: tokio::net::TcpStream, cap: usize) {
    use tokio::io::AsyncWriteExt;
    let body = format!(
        "{{\"error\":{{\"code\":503,\"message\":\"qtune record: this client has {cap} connections \
         open already\",\"type\":\"qtune_record_error\"}}}}"
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
        let held: Vec<Counted> = (0..3).map(|_| c.admit(a, 3).unwrap()).collect();
        assert!(c.admit(a, 3).is_none());
        assert!(c.admit(b, 3).is_some());
        drop(held);
        assert!(c.admit(a, 3).is_some());
        assert!(
            c.0.lock().unwrap().is_empty(),
            "every connection is uncounted"
        );
    }
}
