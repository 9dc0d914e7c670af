//! The files in `deploy/` that a tool here can check.

use std::process::Command;

use crate::common::{bin, tool_present};

/// `systemd-analyze verify` accepts the unit as shipped, with `ExecStart`
/// pointed at the binary this build made (verify also checks that it exists
/// and is executable).
#[test]
fn the_systemd_unit_verifies() {
    if !tool_present("systemd-analyze", "--version", "apt-get install systemd") {
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/evi-server.service"
    ))
    .unwrap();
    let exec = "ExecStart=/usr/local/bin/evi-server";
    assert!(unit.contains(exec), "the unit starts {exec}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("evi-server.service");
    let server = bin("evi-server");
    std::fs::write(
        &path,
        unit.replace(exec, &format!("ExecStart={}", server.display())),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn deploy_file(name: &str) -> String {
    let path = format!("{}/../deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// deploy/README.md installs the binary where the unit's `ExecStart=` runs
/// it (before, the README installed to `~/.cargo/bin` and the unit ran
/// `/usr/local/bin`), and the unit's descriptor limit holds the server's
/// default connection bound (2 descriptors per connection, 128 kept).
#[test]
fn the_unit_runs_what_the_readme_installs() {
    let readme = deploy_file("README.md");
    let unit = deploy_file("evi-server.service");
    let install = "cargo install --locked --path server --root ";
    let root = readme
        .lines()
        .find_map(|l| l.split_once(install).map(|(_, r)| r.trim()))
        .expect("deploy/README.md says how to install the binary");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has ExecStart=");
    assert_eq!(exec, format!("{root}/bin/evi-server"));
    let nofile: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("the unit sets LimitNOFILE=")
        .parse()
        .unwrap();
    assert!(
        (nofile - 128) / 2 >= 8192,
        "LimitNOFILE={nofile} holds fewer than the 8192 default connections"
    );
}

/// `caddy validate` accepts both Caddyfiles as shipped: the one in front of
/// a single server, and the scale-out one in front of two replicas (its
/// site name comes from `EVI_PUBLIC_HOST`, as compose passes it).
#[test]
fn the_caddyfiles_validate() {
    if !tool_present("caddy", "version", "apt-get install caddy") {
        return;
    }
    for file in ["Caddyfile", "scale/Caddyfile"] {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("caddy")
            .args(["validate", "--adapter", "caddyfile", "--config"])
            .arg(deploy_path(file))
            // Caddy keeps state under these; none of it in the user's home.
            .env("XDG_DATA_HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("EVI_PUBLIC_HOST", "sync.example.com")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "caddy validate {file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn deploy_path(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name)
}

/// A checker of `.ci/deploy-requirements.txt`, from the virtualenv
/// `EVI_DEPLOY_CHECKERS` names (`.ci/run` makes it); `None`, said, outside
/// CI when it is not there.
fn checker(name: &str) -> Option<std::path::PathBuf> {
    let venv = std::env::var_os("EVI_DEPLOY_CHECKERS").map(std::path::PathBuf::from);
    let path = venv.map(|v| v.join("bin").join(name));
    match path {
        Some(p) if p.is_file() => Some(p),
        _ => {
            let why = format!(
                "{name} not found: EVI_DEPLOY_CHECKERS must name the virtualenv \
                 .ci/run makes from .ci/deploy-requirements.txt"
            );
            assert!(std::env::var_os("CI").is_none(), "{why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// Both compose files are valid under the Compose Specification's own
/// schema (which check-jsonschema carries): `docker compose config` needs
/// the compose plugin, which no registry here has.
#[test]
fn the_compose_files_follow_the_compose_specification() {
    let Some(check) = checker("check-jsonschema") else {
        return;
    };
    let out = Command::new(check)
        .args(["--builtin-schema", "vendor.compose-spec"])
        .arg(deploy_path("compose.yaml"))
        .arg(deploy_path("scale/compose.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check-jsonschema: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The Kubernetes example is valid under Kubernetes' own schemas, strictly
/// (a misspelt field is an error, not ignored as `kubectl apply` would).
#[test]
fn the_kubernetes_example_validates() {
    let Some(check) = checker("kubernetes-validate") else {
        return;
    };
    let out = Command::new(check)
        .arg("--strict")
        .arg(deploy_path("k8s/evi-server.yaml"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubernetes-validate: {said}");
    for kind in ["deployment", "service", "secret", "poddisruptionbudget"] {
        assert!(
            said.contains(&format!("passed for resource {kind}/evi-server")),
            "{kind} not checked: {said}"
        );
    }
}

/// `docker-compose config` (Debian's, which needs no daemon) resolves the
/// scale-out file with its two secrets given, and refuses it, naming the
/// secret, without them: no deployment starts on an empty password.
#[test]
fn the_scale_out_compose_file_resolves_only_with_its_secrets() {
    if !tool_present(
        "docker-compose",
        "version",
        "apt-get install docker-compose",
    ) {
        return;
    }
    let config = |env: &[(&str, &str)]| {
        let mut c = Command::new("docker-compose");
        c.arg("-f")
            .arg(deploy_path("scale/compose.yaml"))
            .arg("config")
            .env_remove("EVI_PG_PASSWORD")
            .env_remove("EVI_S3_SECRET");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = config(&[
        ("EVI_PG_PASSWORD", "pg-canary"),
        ("EVI_S3_SECRET", "s3-canary"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "docker-compose config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "EVI_SERVER_DATABASE: postgres://evi:pg-canary@postgres:5432/evi",
        "AWS_SECRET_ACCESS_KEY: s3-canary",
        "evi-1:",
        "evi-2:",
        "condition: service_healthy",
        "condition: service_completed_successfully",
    ] {
        assert!(text.contains(want), "{want} not in: {text}");
    }
    let out = config(&[("EVI_S3_SECRET", "s3-canary")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("set EVI_PG_PASSWORD"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every `EVI_SERVER_*` variable the deploy files set is one the server
/// reads (`evi-server --help` lists each flag's variable): a renamed flag
/// would otherwise leave a deployment silently on a default (SQLite in a
/// container's scratch folder, say, instead of Postgres).
#[test]
fn the_deploy_files_set_only_variables_the_server_reads() {
    let help = Command::new(bin("evi-server"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let files = [
        "compose.yaml",
        "scale/compose.yaml",
        "k8s/evi-server.yaml",
        "evi-server.service",
        "Dockerfile",
    ];
    let mut seen = 0;
    for file in files {
        let text = deploy_file(file);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("EVI_SERVER_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            seen += 1;
            // `[env: NAME=]`, or `[env: NAME]` for a flag whose value is
            // a secret (`hide_env_values`).
            assert!(
                help.contains(&format!("[env: {name}="))
                    || help.contains(&format!("[env: {name}]")),
                "{file} sets {name}, which `evi-server --help` does not list"
            );
        }
    }
    assert!(seen > 10, "found only {seen} variables in the deploy files");
}

/// An HTTP server on `addr` that answers every request `200 ok`, as any
/// other server left on a drill's old port would answer its `/healthz`;
/// `None` if the port is taken already (by something else: just as good).
fn impostor(addr: &str) -> Option<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr).ok()?;
    let serving = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for conn in serving.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    Some(listener)
}

/// `deploy/drills/backup-restore.sh` runs its server on a free port and
/// trusts only that server's own "listening on" line: another server on
/// the port the drill once used (answering any `/healthz`) neither passes
/// for it nor stops the drill.
#[test]
fn the_backup_drill_runs_its_own_server_beside_another_on_its_old_port() {
    for (tool, install) in [
        ("curl", "apt-get install curl"),
        ("sqlite3", "apt-get install sqlite3"),
    ] {
        if !tool_present(tool, "--version", install) {
            return;
        }
    }
    let _other = impostor("127.0.0.1:18787");
    let out = Command::new("bash")
        .arg(deploy_path("drills/backup-restore.sh"))
        .env("EVI_SERVER", bin("evi-server"))
        .env("EVI", bin("evi"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("drill passed"),
        "the drill failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
