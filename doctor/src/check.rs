//! The fifteen rows, each decided from what a [`Host`] reads.

use std::collections::BTreeMap;

use sandbox_contract::doctor::{
    AMD64_MACHINES, DEBIAN_DERIVED_IDS, DOCTOR, DOCTOR_VERSION, DoctorReport, DoctorRow,
    IdentityReport, InitObservation, KERNEL_PACKAGES, PIP, PYTHON, PathsReport, PythonReport,
    RowReport, RowValue, SYSTEM, UTC_ALIASES,
};
use sandbox_contract::{CONTRACT_VERSION, IDENTITY};
use serde::Deserialize;

use crate::Host;

/// Where os-release is looked for, in order.
const OS_RELEASE: [&str; 2] = ["/etc/os-release", "/usr/lib/os-release"];

/// `PATH` when it is unset, as `shutil.which` and glibc's `CS_PATH` have it.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// CA bundles looked for after `SSL_CERT_FILE`, in the order Python's `ssl` module and
/// the reference doctor look: OpenSSL's default file on Debian, then the usual bundles.
const CA_BUNDLES: [&str; 3] = [
    "/usr/lib/ssl/cert.pem",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// What `python3` is asked: its version and each named distribution's, as one JSON line.
/// Python 3 of any age; a distribution that cannot be read is `null`. A distribution is
/// looked up as `importlib.metadata.version` finds it (the first `.dist-info` or
/// `.egg-info` of the normalized name along `sys.path`, its `METADATA`, else `PKG-INFO`,
/// else the file itself), by listing the path's folders rather than importing
/// `importlib.metadata`, which costs about 0.1 s of the doctor's 0.2 s; a name not found
/// so, or a path entry that is not a plain folder (a zip, an `.egg`), is left to
/// `importlib.metadata`.
const PYTHON_PROBE: &str = r#"
import json, os, sys

def normal(name):
    out, after = [], False
    for c in name.lower():
        if c in "-_.":
            if not after:
                out.append("_")
            after = True
        else:
            out.append(c)
            after = False
    return "".join(out)

def metadata_version(found):
    for meta in ("METADATA", "PKG-INFO", ""):
        try:
            with open(os.path.join(found, meta) if meta else found, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if text:
            for line in text.splitlines():
                if not line.strip():
                    break
                if line[:8].lower() == "version:":
                    return line[8:].strip()
            return None
    return None

def listed(name):
    want = normal(name)
    for entry in sys.path:
        where = entry or "."
        if not os.path.isdir(where):
            if os.path.exists(where):
                raise LookupError(where)
            continue
        if where.lower().endswith(".egg"):
            raise LookupError(where)
        for child in os.listdir(where):
            stem, _, kind = child.lower().rpartition(".")
            if kind in ("dist-info", "egg-info") and normal(stem.partition("-")[0]) == want:
                return metadata_version(os.path.join(where, child))
    raise LookupError(name)

def installed(name):
    try:
        return listed(name)
    except LookupError:
        pass
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:
        return None

print(json.dumps({"version": sys.version.split()[0],
                  "packages": dict((name, installed(name)) for name in sys.argv[1:])}))
"#;

/// How much of an unreadable answer a message quotes.
const QUOTE_CHARS: usize = 80;

/// `python3`'s answer to [`PYTHON_PROBE`].
#[derive(Deserialize)]
struct Probe {
    version: String,
    packages: BTreeMap<String, Option<String>>,
}

/// Checks every row on `host` and returns the report.
pub fn check(host: &dyn Host) -> DoctorReport {
    std::thread::scope(|scope| {
        // The init row waits on an orphan's exit; the other rows are checked meanwhile.
        let orphans = scope.spawn(|| host.orphan_zombies());
        check_rows(host, move || orphans.join().ok().flatten())
    })
}

/// Every row on `host`, in [`DoctorRow::ALL`]'s order; `orphan_zombies` gives the init
/// row's observation when it is reached.
fn check_rows(host: &dyn Host, orphan_zombies: impl FnOnce() -> Option<u32>) -> DoctorReport {
    let mut rows = Vec::with_capacity(DoctorRow::ALL.len());

    let system = host.system().unwrap_or_default().to_lowercase();
    let machine = host.machine().unwrap_or_default();
    let platform = format!("{system}/{machine}");
    rows.push(row(
        DoctorRow::Architecture,
        system == SYSTEM && AMD64_MACHINES.contains(&machine.as_str()),
        RowValue::Text(platform.clone()),
        || format!("the sandbox is {platform}, not linux/amd64"),
    ));

    rows.push(os_row(host));

    let (uid, gid) = (host.uid(), host.gid());
    let user = host.user_name(uid);
    rows.push(row(
        DoctorRow::User,
        user.as_deref() == Some(IDENTITY.user),
        user.clone().into(),
        || match &user {
            Some(name) => format!("runs as {name}, not {}", IDENTITY.user),
            None => format!(
                "runs as uid {uid}, which has no name, not {}",
                IDENTITY.user
            ),
        },
    ));
    rows.push(row(
        DoctorRow::Uid,
        uid == IDENTITY.uid,
        RowValue::Integer(uid.into()),
        || format!("runs as uid {uid}, not {}", IDENTITY.uid),
    ));
    rows.push(row(
        DoctorRow::Gid,
        gid == IDENTITY.gid,
        RowValue::Integer(gid.into()),
        || format!("runs as gid {gid}, not {}", IDENTITY.gid),
    ));

    let home = host.env("HOME");
    let home_is_dir = host.is_dir(IDENTITY.home);
    rows.push(row(
        DoctorRow::Home,
        home.as_deref() == Some(IDENTITY.home) && home_is_dir,
        home.clone().into(),
        || match home.as_deref() {
            Some(found) if found == IDENTITY.home => format!("{found} is not a directory"),
            found => format!(
                "HOME is {}, not {}",
                found.unwrap_or("unset"),
                IDENTITY.home
            ),
        },
    ));

    let cwd = host.cwd();
    let workdir_writable = host.can_write(IDENTITY.workdir);
    rows.push(row(
        DoctorRow::Workdir,
        workdir_writable,
        cwd.clone().into(),
        || format!("{} is missing or not writable", IDENTITY.workdir),
    ));

    let python3 = which(host, PYTHON);
    rows.push(row(
        DoctorRow::Python,
        python3.is_some(),
        python3.clone().into(),
        || format!("{PYTHON} is not on PATH"),
    ));
    let pip = which(host, PIP);
    rows.push(row(
        DoctorRow::Pip,
        pip.is_some(),
        pip.clone().into(),
        || format!("{PIP} is not on PATH"),
    ));

    let probe = match &python3 {
        Some(python3) => host
            .run_python(python3, PYTHON_PROBE, &KERNEL_PACKAGES)
            .and_then(|answer| read_probe(python3, &answer)),
        None => Err(format!("{PYTHON} is not on PATH")),
    };
    let kernel: BTreeMap<String, Option<String>> = KERNEL_PACKAGES
        .iter()
        .map(|&name| {
            let version = probe
                .as_ref()
                .ok()
                .and_then(|probe| probe.packages.get(name).cloned().flatten());
            (name.to_owned(), version)
        })
        .collect();
    let missing: Vec<&str> = kernel
        .iter()
        .filter(|(_, version)| version.is_none())
        .map(|(name, _)| name.as_str())
        .collect();
    rows.push(row(
        DoctorRow::Kernel,
        missing.is_empty(),
        RowValue::Versions(kernel.clone()),
        || match &probe {
            Ok(_) => format!("missing {}", missing.join(", ")),
            Err(why) => format!("missing {} ({why})", missing.join(", ")),
        },
    ));

    let reserved = IDENTITY.reserved_path;
    let reserved_present = host.is_dir(reserved);
    let reserved_writable = reserved_present && host.can_write(reserved);
    let reserved_state = match (reserved_present, reserved_writable) {
        (false, _) => "missing",
        (true, true) => "writable",
        (true, false) => "read-only",
    };
    rows.push(row(
        DoctorRow::ReservedPath,
        reserved_present && !reserved_writable,
        RowValue::Text(reserved_state.to_owned()),
        || format!("{reserved} is {reserved_state}"),
    ));

    let locale = match host.env("LC_ALL") {
        Some(value) if !value.is_empty() => Some(value),
        _ => host.env("LANG"),
    };
    rows.push(row(
        DoctorRow::Locale,
        locale.as_deref().map(normal_locale) == Some(normal_locale(IDENTITY.locale)),
        locale.clone().into(),
        || {
            let found = locale.as_deref().unwrap_or("unset");
            format!("the locale is {found}, not {}", IDENTITY.locale)
        },
    ));

    let timezone = timezone(host);
    rows.push(row(
        DoctorRow::Timezone,
        timezone
            .as_deref()
            .is_some_and(|zone| UTC_ALIASES.contains(&zone)),
        timezone.clone().into(),
        || {
            let found = timezone.as_deref().unwrap_or("unknown");
            format!("the time zone is {found}, not {}", IDENTITY.timezone)
        },
    ));

    let ca_bundle = ca_bundle(host);
    rows.push(row(
        DoctorRow::CaCertificates,
        ca_bundle.is_some(),
        ca_bundle.clone().into(),
        || "no CA certificates".to_owned(),
    ));

    let orphan_zombies = orphan_zombies();
    let pid1 = host
        .read_file("/proc/1/comm")
        .map(|comm| comm.trim().to_owned());
    let pid1_name = pid1.clone().unwrap_or_else(|| "unknown".to_owned());
    rows.push(row(
        DoctorRow::Init,
        orphan_zombies == Some(0),
        RowValue::Init(InitObservation {
            pid1,
            orphan_zombies,
        }),
        || match orphan_zombies {
            Some(count) => {
                format!("PID 1 ({pid1_name}) does not reap orphans: {count} left as zombies")
            }
            None => "PID 1 cannot be observed".to_owned(),
        },
    ));

    let failed = rows
        .iter()
        .find(|row| row.required && !row.ok)
        .map(|row| row.id);
    DoctorReport {
        doctor: DOCTOR.to_owned(),
        doctor_version: DOCTOR_VERSION.to_owned(),
        contract: CONTRACT_VERSION.to_owned(),
        ok: failed.is_none(),
        failed,
        rows,
        python: PythonReport {
            version: probe.map(|probe| probe.version).unwrap_or_default(),
            executable: python3,
            pip,
        },
        kernel,
        identity: IdentityReport {
            user,
            uid,
            gid,
            home,
            cwd: cwd.unwrap_or_default(),
        },
        paths: PathsReport {
            writable: workdir_writable
                .then(|| IDENTITY.workdir.to_owned())
                .into_iter()
                .collect(),
            read_only: (reserved_present && !reserved_writable)
                .then(|| reserved.to_owned())
                .into_iter()
                .collect(),
        },
        locale,
        timezone,
        ca_bundle,
    }
}

/// A required row; its message is only made when it failed.
fn row(id: DoctorRow, ok: bool, actual: RowValue, message: impl FnOnce() -> String) -> RowReport {
    RowReport {
        id,
        required: true,
        ok,
        expected: id.expected(),
        actual,
        message: (!ok).then(message),
    }
}

/// The `os` row: Debian or Ubuntu as os-release's `ID` or one of its `ID_LIKE`.
fn os_row(host: &dyn Host) -> RowReport {
    let Some(text) = OS_RELEASE.iter().find_map(|path| host.read_file(path)) else {
        return row(DoctorRow::Os, false, RowValue::Null, || {
            format!(
                "neither {} nor {} can be read",
                OS_RELEASE[0], OS_RELEASE[1]
            )
        });
    };
    let release = parse_os_release(&text);
    let field = |key: &str| release.get(key).map(String::as_str).unwrap_or("");
    let (id, id_like) = (field("ID"), field("ID_LIKE"));
    let debian_derived = std::iter::once(id)
        .chain(id_like.split_whitespace())
        .any(|name| DEBIAN_DERIVED_IDS.contains(&name));
    let name = [field("PRETTY_NAME"), id]
        .into_iter()
        .find(|name| !name.is_empty())
        .map(str::to_owned);
    row(DoctorRow::Os, debian_derived, name.into(), || {
        format!("the base is not Debian or Ubuntu (ID={id}, ID_LIKE={id_like})")
    })
}

/// os-release's `KEY=value` lines, values unquoted.
fn parse_os_release(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(key, _)| !key.is_empty() && !key.starts_with('#'))
        .map(|(key, value)| {
            let value = value.trim().trim_matches(['"', '\'']);
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

/// Where `name` is on `PATH`, the way `shutil.which` finds it: an empty entry is the
/// working directory, and an unset `PATH` is [`DEFAULT_PATH`].
fn which(host: &dyn Host, name: &str) -> Option<String> {
    let path = host.env("PATH").unwrap_or_else(|| DEFAULT_PATH.to_owned());
    if path.is_empty() {
        return None;
    }
    path.split(':')
        .map(|dir| match dir {
            "" => name.to_owned(),
            dir if dir.ends_with('/') => format!("{dir}{name}"),
            dir => format!("{dir}/{name}"),
        })
        .find(|candidate| host.is_executable(candidate))
}

/// `python3`'s answer read from its last non-empty line, or why it is unreadable.
fn read_probe(python3: &str, answer: &str) -> Result<Probe, String> {
    let line = answer
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("");
    serde_json::from_str(line).map_err(|_| {
        let quoted: String = line.chars().take(QUOTE_CHARS).collect();
        let more = if line.chars().count() > QUOTE_CHARS {
            "…"
        } else {
            ""
        };
        format!("{python3} gave an unreadable answer: `{quoted}{more}`")
    })
}

/// A locale name compared loosely: `C.UTF-8`, `c.utf8` and `C_UTF-8` are one.
fn normal_locale(name: &str) -> String {
    name.to_lowercase().replace(['-', '_'], "")
}

/// The time zone: `TZ`, else `/etc/timezone`, else the zone `/etc/localtime` links into,
/// else the C library's name for local time.
fn timezone(host: &dyn Host) -> Option<String> {
    if let Some(tz) = host.env("TZ").filter(|tz| !tz.is_empty()) {
        return Some(tz.trim_start_matches(':').to_owned());
    }
    if let Some(zone) = host
        .read_file("/etc/timezone")
        .map(|text| text.trim().to_owned())
        .filter(|zone| !zone.is_empty())
    {
        return Some(zone);
    }
    if let Some(zone) = host
        .read_link("/etc/localtime")
        .and_then(|target| Some(target.split_once("zoneinfo/")?.1.to_owned()))
    {
        return Some(zone);
    }
    host.local_zone_name()
}

/// The first non-empty CA bundle: `SSL_CERT_FILE`, then [`CA_BUNDLES`].
fn ca_bundle(host: &dyn Host) -> Option<String> {
    host.env("SSL_CERT_FILE")
        .filter(|path| !path.is_empty())
        .into_iter()
        .chain(CA_BUNDLES.iter().map(|&path| path.to_owned()))
        .find(|path| host.file_len(path).is_some_and(|len| len > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_values_are_unquoted_and_comments_skipped() {
        let release = parse_os_release(
            "# a comment=x\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\n\
             ID_LIKE='ubuntu debian'\nnonsense\n=value\n",
        );
        assert_eq!(release["PRETTY_NAME"], "Debian GNU/Linux 13 (trixie)");
        assert_eq!(release["ID"], "debian");
        assert_eq!(release["ID_LIKE"], "ubuntu debian");
        assert_eq!(release.len(), 3);
    }

    /// The probe's own lookup answers as `importlib.metadata.version` does, on the host's
    /// `python3`, over two path folders laid out as installers leave them.
    #[test]
    #[cfg_attr(
        not(host_python3),
        ignore = "needs python3 on PATH, and none answered when these tests were built"
    )]
    fn the_python_probe_finds_versions_as_importlib_metadata_does() {
        use std::process::Command;
        let root = std::env::temp_dir().join(format!("doctor-probe-{}", std::process::id()));
        let (first, second) = (root.join("first"), root.join("second"));
        let write = |path: std::path::PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("folder");
            std::fs::write(path, text).expect("written");
        };
        let meta = |version: &str| {
            format!("Metadata-Version: 2.1\nName: x\nVersion: {version}\n\nVersion: body\n")
        };
        write(first.join("Foo_Bar-1.0.dist-info/METADATA"), &meta("1.0"));
        write(second.join("foo.bar-2.0.dist-info/METADATA"), &meta("2.0"));
        write(
            second.join("only_second-3.0.dist-info/METADATA"),
            &meta("3.0"),
        );
        write(first.join("eggdir-0.4.egg-info/PKG-INFO"), &meta("0.4"));
        write(first.join("eggfile-0.5.egg-info"), &meta("0.5"));
        write(first.join("empty_meta-0.6.dist-info/METADATA"), "");
        write(
            first.join("empty_meta-0.6.dist-info/PKG-INFO"),
            &meta("0.6"),
        );
        write(first.join("no_version-1.dist-info/METADATA"), "Name: x\n");
        let names = [
            "foo-bar",
            "FOO.BAR",
            "foo__bar",
            "only-second",
            "eggdir",
            "eggfile",
            "empty-meta",
            "no_version",
            "absent",
        ];
        let path = std::env::join_paths([&first, &second]).expect("a path");
        // The probe's own lookup alone, without its fallback to importlib.metadata.
        let listed = "\ndef fast(n):\n    try:\n        return listed(n)\n    except LookupError:\n        return 'not listed'\n\
                      print(json.dumps({n: fast(n) for n in sys.argv[1:]}))";
        let ours = Command::new("python3")
            .arg("-c")
            .arg(format!("{PYTHON_PROBE}{listed}"))
            .args(names)
            .env("PYTHONPATH", &path)
            .current_dir("/")
            .output()
            .expect("python3 runs");
        let theirs = Command::new("python3")
            .arg("-c")
            .arg(
                "import json, sys\nfrom importlib import metadata\n\
                 def v(n):\n    try:\n        return metadata.version(n)\n    except Exception:\n        return None\n\
                 print(json.dumps({n: v(n) for n in sys.argv[1:]}))",
            )
            .args(names)
            .env("PYTHONPATH", &path)
            .current_dir("/")
            .output()
            .expect("python3 runs");
        let _ = std::fs::remove_dir_all(&root);
        let stdout = String::from_utf8_lossy(&ours.stdout);
        let mut lines = stdout.lines();
        let (probe, fast) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
        let parse = |line: &str| -> serde_json::Value {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ours.stderr)))
        };
        let (probe, mut fast) = (parse(probe), parse(fast));
        let theirs: serde_json::Value = serde_json::from_slice(&theirs.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&theirs.stderr)));
        assert_eq!(probe["packages"], theirs);
        assert_eq!(fast["absent"], "not listed");
        fast["absent"] = serde_json::Value::Null;
        assert_eq!(fast, theirs, "the listing alone");
        // And the layout meant what it says: the first folder wins, a miss is null.
        assert_eq!(theirs["FOO.BAR"], "1.0");
        assert_eq!(theirs["only-second"], "3.0");
        assert_eq!(theirs["absent"], serde_json::Value::Null);
    }

    #[test]
    fn locales_compare_loosely() {
        assert_eq!(normal_locale("C.UTF-8"), normal_locale("c.utf8"));
        assert_ne!(normal_locale("C.UTF-8"), normal_locale("en_US.UTF-8"));
    }

    #[test]
    fn a_probe_is_read_from_its_last_line_and_garbage_is_quoted() {
        let probe = read_probe(
            "python3",
            "a warning\n{\"version\": \"3.13.5\", \"packages\": {\"ipykernel\": null}}\n\n",
        )
        .unwrap();
        assert_eq!(probe.version, "3.13.5");
        assert_eq!(probe.packages["ipykernel"], None);
        let long = "x".repeat(200);
        let error = read_probe("python3", &long).err().unwrap();
        assert_eq!(
            error,
            format!("python3 gave an unreadable answer: `{}…`", "x".repeat(80))
        );
        assert_eq!(
            read_probe("/usr/bin/python3", "").err().unwrap(),
            "/usr/bin/python3 gave an unreadable answer: ``"
        );
    }
}
