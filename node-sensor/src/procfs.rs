//! Parsers for the `/proc` files the sensor reads. Pure functions over text: the kernel's
//! formats, and garbage, are covered by unit tests.

/// `/proc/meminfo`: total and available memory, bytes.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |key: &str| -> Option<u64> {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(key)?.strip_prefix(':')?;
            let mut parts = rest.split_whitespace();
            let value: u64 = parts.next()?.parse().ok()?;
            let scale = match parts.next() {
                Some("kB") => 1024,
                None => 1,
                Some(_) => return None,
            };
            value.checked_mul(scale)
        })
    };
    let total = field("MemTotal")?;
    // MemAvailable exists since Linux 3.14; MemFree is the pessimistic fallback.
    let available = field("MemAvailable").or_else(|| field("MemFree"))?;
    Some((total, available.min(total)))
}

/// Number of CPUs in a list such as `0-3,6,8-9` (`Cpus_allowed_list`, `cpuset.cpus`).
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let mut count = 0u32;
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().ok()?;
                let b: u32 = b.trim().parse().ok()?;
                if b < a {
                    return None;
                }
                count = count.checked_add(b - a + 1)?;
            }
            None => {
                part.trim().parse::<u32>().ok()?;
                count = count.checked_add(1)?;
            }
        }
    }
    Some(count)
}

/// The `Cpus_allowed_list` of `/proc/PID/status`, counted.
pub fn parse_status_cpus(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .and_then(count_cpu_list)
}

/// `/proc/PID/schedstat` (or a thread's): nanoseconds on a CPU and nanoseconds runnable but
/// waiting for one (including time its cgroup was throttled: measured, see the crate docs).
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut parts = text.split_whitespace();
    let run = parts.next()?.parse().ok()?;
    let wait = parts.next()?.parse().ok()?;
    Some((run, wait))
}

/// The aggregate `cpu` line of `/proc/stat`: busy ticks (everything but idle and iowait) and
/// all ticks.
pub fn parse_proc_stat_cpu(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    if values.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
    // inside user and nice.
    let idle = values[3] + values.get(4).copied().unwrap_or(0);
    let all: u64 = values.iter().take(8).sum();
    Some((all.saturating_sub(idle), all))
}

/// The `some ... total=MICROSECONDS` of a pressure file (`/proc/pressure/cpu`, v2
/// `cpu.pressure`).
pub fn parse_pressure_some_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))
        .and_then(|t| t.parse().ok())
}

/// The command name (field 2) of `/proc/PID/stat`, without its parentheses.
pub fn parse_stat_comm(stat: &str) -> Option<&str> {
    let start = stat.find('(')?;
    let end = stat.rfind(')')?;
    (end > start).then(|| &stat[start + 1..end])
}

/// The fields of `/proc/PID/stat` that identify a process and its life: command name,
/// state letter (`Z` for a zombie), parent pid and start time (clock ticks after boot; with
/// the pid it tells a process from a later one that reused the pid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatIdentity {
    /// The command name, without its parentheses.
    pub comm: String,
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// The parent's pid.
    pub ppid: u32,
    /// Start time, clock ticks after boot.
    pub start_time: u64,
}

/// Parses the [`StatIdentity`] fields of a `/proc/PID/stat` line.
pub fn parse_stat_identity(stat: &str) -> Option<StatIdentity> {
    let comm = parse_stat_comm(stat)?.to_owned();
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // State and ppid are fields 3 and 4 of the line, start time field 22: 0, 1 and 19 here.
    Some(StatIdentity {
        comm,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_identity_reads_names_with_spaces_and_parentheses() {
        let stat = "4242 (heat (2) d) S 4200 4242 4200 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat_identity(stat),
            Some(StatIdentity {
                comm: "heat (2) d".to_owned(),
                state: 'S',
                ppid: 4200,
                start_time: 987654,
            })
        );
        assert_eq!(parse_stat_identity("4242 (x) Z"), None);
        assert_eq!(parse_stat_identity("garbage"), None);
    }

    #[test]
    fn meminfo_in_kib() {
        let text = "MemTotal:        8000 kB\nMemFree:  100 kB\nMemAvailable:    3000 kB\n";
        assert_eq!(parse_meminfo(text), Some((8000 * 1024, 3000 * 1024)));
        let old = "MemTotal: 8000 kB\nMemFree: 100 kB\n";
        assert_eq!(parse_meminfo(old), Some((8000 * 1024, 100 * 1024)));
        assert_eq!(parse_meminfo("MemTotal: x kB\n"), None);
        assert_eq!(parse_meminfo(""), None);
        assert_eq!(parse_meminfo("MemTotal: 1 MB\nMemFree: 1 kB\n"), None);
    }

    #[test]
    fn cpu_lists_count() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list("5"), Some(1));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert_eq!(count_cpu_list("a-b"), None);
        assert_eq!(
            parse_status_cpus("Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n"),
            Some(2)
        );
    }

    #[test]
    fn schedstat_and_stat() {
        assert_eq!(
            parse_schedstat("1263070086 1227766695 182\n"),
            Some((1_263_070_086, 1_227_766_695))
        );
        assert_eq!(parse_schedstat("12"), None);
        let stat = "cpu  412680 0 243822 2411607 1933 0 3410 1943 0 0\ncpu0 1 2 3 4\n";
        let (busy, all) = parse_proc_stat_cpu(stat).expect("parses");
        assert_eq!(all, 412_680 + 243_822 + 2_411_607 + 1933 + 3410 + 1943);
        assert_eq!(busy, all - 2_411_607 - 1933);
        assert_eq!(parse_proc_stat_cpu("cpu  1 x 3 4\n"), None);
        assert_eq!(parse_proc_stat_cpu("intr 5\n"), None);
    }

    #[test]
    fn pressure_and_comm() {
        let psi = "some avg10=11.62 avg60=4.07 avg300=1.86 total=1208052562\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_total(psi), Some(1_208_052_562));
        assert_eq!(parse_pressure_some_total("full total=3"), None);
        assert_eq!(
            parse_stat_comm("123 (heat2d (x)) R 1 2"),
            Some("heat2d (x)")
        );
        assert_eq!(parse_stat_comm("garbage"), None);
    }
}
