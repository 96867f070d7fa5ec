//! A slow wire in user space, where the kernel has no `sch_netem` (see
//! [`crate::net::Net::netem_missing`]): the partitions binary run again as
//! `partitions wire <inner> <outer> <control>` opens two TAP devices (in the
//! root namespace; the harness then moves `inner` into a node's namespace
//! as its `eth0` and puts `outer` on the bridge where the veth's host side
//! would be) and forwards every Ethernet frame between them, each held for
//! the delay and dropped at random at the loss rate that the file
//! `control` says (`<delay_ms> <loss_percent>`, read every 20 ms; no file:
//! no delay, no loss). Frames keep their order in each direction. The
//! devices go away with the process.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// `TUNSETIFF` (linux/if_tun.h) and the flags of a TAP device without the
/// packet information header.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// A new TAP device `name`, its file (reads and writes whole frames).
pub fn tap(name: &str) -> std::io::Result<File> {
    let path = std::ffi::CString::new("/dev/net/tun").unwrap();
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a file descriptor we own from here on.
    let file = unsafe { File::from_raw_fd(fd) };
    // struct ifreq: the name (IFNAMSIZ, 16 bytes), then the flags (a short)
    // in a union of 24 bytes.
    let mut ifreq = [0u8; 40];
    assert!(name.len() < 16, "interface name {name} too long");
    ifreq[..name.len()].copy_from_slice(name.as_bytes());
    ifreq[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a struct ifreq, which `ifreq` is
    // large enough to hold; the fd is open.
    if unsafe { libc::ioctl(fd, TUNSETIFF as _, ifreq.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// The wire's settings now: delay in ms (high 32 bits), loss in percent.
struct Settings(AtomicU64);

impl Settings {
    fn get(&self) -> (u64, u64) {
        let v = self.0.load(Ordering::Relaxed);
        (v >> 32, v & 0xffff_ffff)
    }
}

/// Frames on their way, each with when it is due, and the writer's wake-up.
type Queue = Arc<(Mutex<VecDeque<(Instant, Vec<u8>)>>, Condvar)>;

/// One direction: frames read from `from`, written to `to` once due.
fn direction(mut from: File, mut to: File, settings: Arc<Settings>, seed: u64) {
    let queue: Queue = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
    let writer = queue.clone();
    std::thread::spawn(move || loop {
        let (lock, ready) = &*writer;
        let mut frames = lock.lock().unwrap();
        while frames.is_empty() {
            frames = ready.wait(frames).unwrap();
        }
        let (due, _) = frames[0];
        let now = Instant::now();
        if due > now {
            drop(frames);
            std::thread::sleep(due - now);
            continue;
        }
        let (_, frame) = frames.pop_front().unwrap();
        drop(frames);
        // A device that is down refuses the frame: it is lost, as on a wire.
        let _ = to.write(&frame);
    });
    let mut rng = seed | 1;
    let mut buffer = vec![0u8; 65_536];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(n) => n,
            Err(err) if err.raw_os_error() == Some(libc::EIO) => {
                // Not up yet.
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(err) => panic!("wire: read: {err}"),
        };
        let (delay, loss) = settings.get();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        if loss > 0 && rng % 100 < loss {
            continue;
        }
        let (lock, ready) = &*queue;
        lock.lock().unwrap().push_back((Instant::now() + Duration::from_millis(delay), buffer[..n].to_vec()));
        ready.notify_one();
    }
}

/// `partitions wire <inner> <outer> <control>`: runs until killed.
pub fn run(args: &[String]) {
    let [inner, outer, control] = args else { panic!("wire arguments: <inner> <outer> <control>") };
    let a = tap(inner).unwrap_or_else(|err| panic!("wire: TAP device {inner}: {err}"));
    let b = tap(outer).unwrap_or_else(|err| panic!("wire: TAP device {outer}: {err}"));
    let settings = Arc::new(Settings(AtomicU64::new(0)));
    let seed = crate::log::mono_us();
    for (from, to, seed) in [(a.try_clone().unwrap(), b.try_clone().unwrap(), seed), (b, a, seed.rotate_left(17))] {
        let settings = settings.clone();
        std::thread::spawn(move || direction(from, to, settings, seed));
    }
    loop {
        let (delay, loss) = std::fs::read_to_string(control)
            .ok()
            .and_then(|text| {
                let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
                Some((fields.next()??, fields.next()??))
            })
            .unwrap_or((0, 0));
        settings.0.store((delay << 32) | loss.min(100), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
    }
}
