//! A private network of Linux network namespaces, one per server and per
//! client process, so that a test can partition it (issue 39 §1). Needs
//! root (`ip netns`, veth pairs, bridges).
//!
//! Every namespace `<prefix>-<name>` has `eth0`, a veth whose peer is a
//! port of the data bridge `<prefix>b0`, at `10.213.0.<n>`. Clients also
//! have `eth1` on the store bridge `<prefix>b1` (`10.213.1.<n>`), which no
//! partition touches: the fenced store stands for the resource the locks
//! protect, reachable by every holder, and the harness (root namespace,
//! `10.213.1.254`) reads it there.
//!
//! A partition moves the data ports of a group of namespaces to an island
//! bridge of its own: they reach each other and nothing else. Every
//! namespace knows every other's MAC address (permanent neighbour entries),
//! so a frame for a node across the cut is flooded on a bridge where no
//! port takes it and vanishes, as in a real partition: no ICMP, no RST, no
//! ARP failure: connections go silent, new connects time out. Healing moves
//! the ports back. (Delay and loss need `sch_netem`, which this kernel lacks:
//! see [`Net::netem_missing`].)
//!
//! Everything is removed on drop, also when the test panics; [`Net::new`]
//! first removes what a killed run may have left under the same prefix.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The data subnet (`.0.<n>`) and the store subnet (`.1.<n>`).
pub const SUBNET: &str = "10.213";

pub struct Net {
    prefix: String,
    /// Namespace names (short), with their host number.
    nodes: Vec<(String, u8, bool)>,
    islands: u32,
    children: Vec<Child>,
}

/// Runs `ip` with `args`; panics with its stderr when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2 is installed");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
}

/// Runs `ip` with `args`, ignoring failure (teardown of what may not exist).
fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

impl Net {
    /// An empty network under `prefix` (at most 5 characters: interface
    /// names have 15). Removes leftovers of an earlier run first.
    pub fn new(prefix: &str) -> Net {
        assert!(prefix.len() <= 5, "prefix {prefix} too long for interface names");
        let net = Net { prefix: prefix.into(), nodes: Vec::new(), islands: 0, children: Vec::new() };
        net.remove_all();
        for (bridge, store) in [(net.bridge(0), false), (net.bridge(1), true)] {
            ip(&["link", "add", &bridge, "type", "bridge"]);
            ip(&["link", "set", &bridge, "up"]);
            if store {
                ip(&["addr", "add", &format!("{SUBNET}.1.254/24"), "dev", &bridge]);
            }
        }
        net
    }

    /// `None` when this kernel has `tc netem` (delay, loss), else why not:
    /// what `tc` said when asked for it on the loopback of a namespace of
    /// its own (removed after). A kernel built without `sch_netem` and
    /// without modules says "Specified qdisc kind is unknown".
    pub fn netem_missing() -> Option<String> {
        let out = Command::new("sh")
            .args([
                "-c",
                "ip netns add dknetem && ip -n dknetem link set lo up && tc -n dknetem qdisc add dev lo root netem delay 1ms; r=$?; ip netns del dknetem 2>/dev/null; exit $r",
            ])
            .stdout(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(err) => Some(err.to_string()),
        }
    }

    fn bridge(&self, n: u32) -> String {
        format!("{}b{n}", self.prefix)
    }

    fn namespace(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn host_side(&self, number: u8, port: u8) -> String {
        format!("{}h{number}p{port}", self.prefix)
    }

    fn mac(number: u8, port: u8) -> String {
        format!("02:d6:00:00:{port:02x}:{number:02x}")
    }

    /// The data address of node `name`.
    pub fn addr(&self, name: &str) -> String {
        let &(_, number, _) = self.nodes.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("no node {name}"));
        format!("{SUBNET}.0.{number}")
    }

    /// Adds node `name` (host number `number`, 1..=250) on the data bridge,
    /// and on the store bridge when `store` (clients and the store).
    pub fn add(&mut self, name: &str, number: u8, store: bool) {
        let ns = self.namespace(name);
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        for port in 0..if store { 2 } else { 1 } {
            let host = self.host_side(number, port);
            let inner = format!("eth{port}");
            ip(&["link", "add", &host, "type", "veth", "peer", "name", &inner, "netns", &ns]);
            ip(&["-n", &ns, "link", "set", &inner, "address", &Self::mac(number, port)]);
            ip(&["-n", &ns, "addr", "add", &format!("{SUBNET}.{port}.{number}/24"), "dev", &inner]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
            ip(&["link", "set", &host, "master", &self.bridge(port.into())]);
            ip(&["link", "set", &host, "up"]);
        }
        self.nodes.push((name.into(), number, store));
    }

    /// [`Net::add`], but with node `name`'s data port (`eth0`) a TAP device
    /// whose frames a user-space wire (`exe wire ...`, see `wire.rs`)
    /// carries to and from its port on the bridge, delayed and lost as the
    /// file `control` says. The wire is killed on drop.
    pub fn add_wired(&mut self, name: &str, number: u8, store: bool, exe: &Path, control: &Path) {
        let ns = self.namespace(name);
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let inner = format!("{}w{number}", self.prefix);
        let host = self.host_side(number, 0);
        let child = Command::new(exe)
            .args(["wire", &inner, &host, control.to_str().unwrap()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("the wire");
        self.children.push(child);
        let started = std::time::Instant::now();
        let exists = |dev: &str| Command::new("ip").args(["link", "show", dev]).output().is_ok_and(|o| o.status.success());
        while !(exists(&inner) && exists(&host)) {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "the wire's TAP devices {inner} {host}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        ip(&["link", "set", &inner, "netns", &ns]);
        ip(&["-n", &ns, "link", "set", &inner, "name", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "address", &Self::mac(number, 0)]);
        ip(&["-n", &ns, "addr", "add", &format!("{SUBNET}.0.{number}/24"), "dev", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["link", "set", &host, "master", &self.bridge(0)]);
        ip(&["link", "set", &host, "up"]);
        if store {
            let host = self.host_side(number, 1);
            ip(&["link", "add", &host, "type", "veth", "peer", "name", "eth1", "netns", &ns]);
            ip(&["-n", &ns, "link", "set", "eth1", "address", &Self::mac(number, 1)]);
            ip(&["-n", &ns, "addr", "add", &format!("{SUBNET}.1.{number}/24"), "dev", "eth1"]);
            ip(&["-n", &ns, "link", "set", "eth1", "up"]);
            ip(&["link", "set", &host, "master", &self.bridge(1)]);
            ip(&["link", "set", &host, "up"]);
        }
        self.nodes.push((name.into(), number, store));
    }

    /// Once every node is added: permanent neighbour entries everywhere, so
    /// no ARP is ever needed (a partition stays silent).
    pub fn seal(&self) {
        for (name, _, store) in &self.nodes {
            let mut batch = String::new();
            for (other, number, other_store) in &self.nodes {
                if other == name {
                    continue;
                }
                batch += &format!("neigh replace {SUBNET}.0.{number} lladdr {} dev eth0 nud permanent\n", Self::mac(*number, 0));
                if *store && *other_store {
                    batch += &format!("neigh replace {SUBNET}.1.{number} lladdr {} dev eth1 nud permanent\n", Self::mac(*number, 1));
                }
            }
            let file = std::env::temp_dir().join(format!("{}-neigh-{name}", self.prefix));
            std::fs::write(&file, batch).unwrap();
            ip(&["-n", &self.namespace(name), "-batch", file.to_str().unwrap()]);
            let _ = std::fs::remove_file(file);
        }
    }

    /// A floating address, `SUBNET.0.<number>` (what a failover manager
    /// moves from a primary to the replica it promotes, as keepalived does
    /// a virtual IP), served by node `to` as the nodes `seen_by` see it:
    /// `to` answers at it, and their frames for it go to `to` (permanent
    /// neighbour entries, as [`Net::seal`]'s). Nodes not in `seen_by` keep
    /// sending where they did: one cut off goes on reaching the old holder.
    pub fn float(&self, number: u8, to: &str, seen_by: &[&str]) {
        let address = format!("{SUBNET}.0.{number}");
        let &(_, to_number, _) = self.nodes.iter().find(|(n, _, _)| n == to).unwrap_or_else(|| panic!("no node {to}"));
        ip(&["-n", &self.namespace(to), "addr", "replace", &format!("{address}/32"), "dev", "eth0"]);
        for name in seen_by {
            ip(&[
                "-n",
                &self.namespace(name),
                "neigh",
                "replace",
                &address,
                "lladdr",
                &Self::mac(to_number, 0),
                "dev",
                "eth0",
                "nud",
                "permanent",
            ]);
        }
    }

    /// Cuts the nodes of `group` off from every other node (both ways);
    /// they still reach each other. Returns when the cut is in place.
    pub fn isolate(&mut self, group: &[&str]) {
        self.islands += 1;
        let island = self.bridge(1 + self.islands);
        ip(&["link", "add", &island, "type", "bridge"]);
        ip(&["link", "set", &island, "up"]);
        for name in group {
            let &(_, number, _) = self.nodes.iter().find(|(n, _, _)| n == name).unwrap();
            ip(&["link", "set", &self.host_side(number, 0), "master", &island]);
        }
    }

    /// Drops `percent`% of the packets leaving node `name`'s data port
    /// (`eth0`) and of those reaching it, each at random (an nftables
    /// `numgen random` rule in its namespace): loss without delay, which
    /// TCP turns into retransmissions (200 ms and more each). Removed with
    /// the namespace, or by [`Net::lossless`].
    pub fn lossy(&self, name: &str, percent: u8) {
        self.nft_table(
            name,
            "dkloss",
            &format!(
                "  chain out {{ type filter hook output priority 0; oifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n  chain in {{ type filter hook input priority 0; iifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n"
            ),
        );
    }

    /// Cuts one direction only: node `name` no longer receives what node
    /// `from` sends it on the data network (an nftables rule on its
    /// `eth0` input), while what it sends still arrives. For a client and
    /// its server: its requests arrive and are acted on, their answers are
    /// lost. Removed with the namespace, or by [`Net::hear`].
    pub fn deafen(&self, name: &str, from: &str) {
        self.drop_input(name, &self.addr(from));
    }

    /// A one-way partition: the nodes of `group` no longer receive what any
    /// node outside it sends them on the data network (an nftables rule on
    /// each one's `eth0` input), while what they send still arrives and
    /// they still hear each other. TCP needs both directions, so every
    /// connection across stalls, but the majority's servers and clients
    /// still hear from the group's (a primary's replication stream, its
    /// answers to a sentinel's requests that it never received). Removed
    /// by [`Net::hear`] on each node of the group.
    pub fn deafen_group(&self, group: &[&str]) {
        let heard = group.iter().map(|name| self.addr(name)).collect::<Vec<_>>().join(", ");
        for name in group {
            self.drop_input(name, &format!("!= {{ {heard} }}"));
        }
    }

    /// Node `name` drops what reaches its data port from the sources that
    /// `saddr` (an nftables address match) selects: table `dkoneway`.
    fn drop_input(&self, name: &str, saddr: &str) {
        self.nft_table(
            name,
            "dkoneway",
            &format!("  chain in {{ type filter hook input priority 0; iifname \"eth0\" ip saddr {saddr} drop; }}\n"),
        );
    }

    /// Loads `table inet <table>` with `chains` in node `name`'s namespace.
    fn nft_table(&self, name: &str, table: &str, chains: &str) {
        let file = std::env::temp_dir().join(format!("{}-{table}-{name}", self.prefix));
        std::fs::write(&file, format!("table inet {table} {{\n{chains}}}\n")).unwrap();
        ip(&["netns", "exec", &self.namespace(name), "nft", "-f", file.to_str().unwrap()]);
        let _ = std::fs::remove_file(file);
    }

    /// Node `name` without [`Net::deafen`]'s or [`Net::deafen_group`]'s rule.
    pub fn hear(&self, name: &str) {
        ip(&["netns", "exec", &self.namespace(name), "nft", "delete", "table", "inet", "dkoneway"]);
    }

    /// The namespace's name of node `name` (to run a program in it).
    pub fn namespace_of(&self, name: &str) -> String {
        self.namespace(name)
    }

    /// Node `name` without [`Net::lossy`]'s loss.
    pub fn lossless(&self, name: &str) {
        ip(&["netns", "exec", &self.namespace(name), "nft", "delete", "table", "inet", "dkloss"]);
    }

    /// Every node back on the data bridge; island bridges removed.
    pub fn heal(&mut self) {
        for &(_, number, _) in &self.nodes {
            ip(&["link", "set", &self.host_side(number, 0), "master", &self.bridge(0)]);
        }
        for n in 1..=self.islands {
            ip_quiet(&["link", "del", &self.bridge(1 + n)]);
        }
        self.islands = 0;
    }

    /// `program` with `args` in node `name`'s namespace; its stdout and
    /// stderr go to `log`. Killed on drop.
    pub fn spawn(&mut self, name: &str, program: &Path, args: &[String], env: &[(&str, String)], log: &Path) -> u32 {
        let log = std::fs::File::create(log).unwrap();
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.namespace(name)]).arg(program).args(args);
        for (key, value) in env {
            command.env(key, value);
        }
        // `ip netns exec` execs the program: the child's pid is its own.
        let child = command.stdin(Stdio::null()).stdout(log.try_clone().unwrap()).stderr(log).spawn().expect("ip netns exec");
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Waits for the child `pid` to exit by itself within `timeout`;
    /// returns whether it exited with success.
    pub fn wait(&mut self, pid: u32, timeout: std::time::Duration) -> Option<bool> {
        let deadline = std::time::Instant::now() + timeout;
        let child = self.children.iter_mut().find(|c| c.id() == pid)?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status.success());
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `redis-cli` in node `name`'s namespace, to `host:port`; its output
    /// (empty when it fails).
    pub fn cli(&self, name: &str, host: &str, port: u16, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.namespace(name), "redis-cli", "-h", host, "-p", &port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default()
    }

    /// `program` with `args` in node `name`'s namespace, to its end; its
    /// stdout and stderr.
    pub fn exec(&self, name: &str, program: &str, args: &[String]) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.namespace(name), program]).args(args).output().expect("ip netns exec");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    fn remove_all(&self) {
        let listed = Command::new("ip").args(["netns", "list"]).output().map(|o| o.stdout).unwrap_or_default();
        let namespaces: Vec<String> = String::from_utf8_lossy(&listed)
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|ns| ns.starts_with(&format!("{}-", self.prefix)))
            .map(String::from)
            .collect();
        for ns in &namespaces {
            // Whatever still runs in it (a killed run's servers).
            let pids = Command::new("ip").args(["netns", "pids", ns]).output().map(|o| o.stdout).unwrap_or_default();
            for pid in String::from_utf8_lossy(&pids).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        // The veths' host sides and the bridges first: a namespace goes
        // away in the background, and its veths with it, too late for a
        // next run that adds the same names at once.
        let links = Command::new("ip").args(["-o", "link", "show"]).output().map(|o| o.stdout).unwrap_or_default();
        for line in String::from_utf8_lossy(&links).lines() {
            let name = line.split(':').nth(1).unwrap_or_default().trim().split('@').next().unwrap_or_default();
            if name.starts_with(&format!("{}h", self.prefix)) || name.starts_with(&format!("{}b", self.prefix)) {
                ip_quiet(&["link", "del", name]);
            }
        }
        for ns in &namespaces {
            ip_quiet(&["netns", "del", ns]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_all();
    }
}
