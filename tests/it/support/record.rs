//! Helpers of the tests that record a session with `qtune record` in front of the real
//! llama-server (`traffic_record`, `workload_trace`).

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Kills (and reaps) a child when the test ends, however it ends.
pub struct Reap(pub Child);
impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(
            Instant::now() < deadline,
            "{what}: not ready after {secs} s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn signal(child: &Child, sig: i32) {
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

pub fn wait_exit(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "qtune record did not stop in {secs} s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The real llama-server on `model` (linked into `dir` as `link`) with `args`, healthy; None
/// after SKIP when there is no real server.
pub fn start_server(dir: &Path, model: &Path, link: &str, args: &[&str]) -> Option<(Reap, u16)> {
    let server = super::real_server()?;
    let m = dir.join(link);
    std::os::unix::fs::symlink(model, &m).unwrap();
    let port = super::free_port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(server)
        .arg("-m")
        .arg(&m)
        .args(args)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let child = Reap(child);
    wait_until("llama-server", 300, || super::health_ok(port));
    Some((child, port))
}

/// `qtune record` in front of `upstream`, writing `out`; its stdout and stderr go to
/// `dir/record.out` and `dir/record.err`.
pub fn start_record(upstream: u16, out: &Path, dir: &Path) -> (Reap, u16) {
    start_record_at(&format!("http://127.0.0.1:{upstream}/"), out, dir)
}

/// `start_record` towards the upstream URL `upstream` as given.
pub fn start_record_at(upstream: &str, out: &Path, dir: &Path) -> (Reap, u16) {
    let port = super::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_qtune"))
        .env_remove("QTUNE_LOG")
        .args(["record", "--upstream", upstream])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--out"])
        .arg(out)
        .stdout(std::fs::File::create(dir.join("record.out")).unwrap())
        .stderr(std::fs::File::create(dir.join("record.err")).unwrap())
        .spawn()
        .unwrap();
    let child = Reap(child);
    wait_until("qtune record", 60, || super::health_ok(port));
    (child, port)
}

/// Stop a recorder with SIGINT and wait for its trace to be complete.
pub fn stop_record(rec: &mut Reap, dir: &Path) {
    signal(&rec.0, libc::SIGINT);
    let st = wait_exit(&mut rec.0, 60);
    let err = std::fs::read_to_string(dir.join("record.err")).unwrap_or_default();
    assert!(st.success(), "{st:?}\n{err}");
}

/// A TCP connection to 127.0.0.1:`port` from the loopback address `from` (another client, as
/// the proxy sees it: 127.0.0.2, 127.0.0.3, ...).
pub fn connect_from(from: std::net::Ipv4Addr, port: u16) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    let addr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let src = addr(from, 0);
        let r = libc::bind(fd, &src as *const _ as *const libc::sockaddr, len);
        assert_eq!(r, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let dst = addr(std::net::Ipv4Addr::LOCALHOST, port);
        let r = libc::connect(fd, &dst as *const _ as *const libc::sockaddr, len);
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}
