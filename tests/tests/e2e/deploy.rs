//! The files in `deploy/` that a tool here can check.

use std::process::Command;

use crate::common::bin;

/// `systemd-analyze verify` accepts the unit as shipped, with `ExecStart`
/// pointed at the binary this build made (verify also checks that it exists
/// and is executable).
#[test]
fn the_systemd_unit_verifies() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed");
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
