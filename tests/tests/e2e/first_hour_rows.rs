//! Issue 21, the first hour's smaller rows, as a user meets them: the
//! watcher's service runs an installed `evi`, never the build folder's;
//! revoking the device one is on asks first; config mistakes name their key
//! (or say what is wrong where no key applies); a push through a bad network
//! says once that it retries; a key passphrase has a minimum, and the key
//! commands keep stdout for data. Each test checks what the user reads
//! (stdout, stderr) and the exit code.

use std::path::PathBuf;

use crate::common::{Device, Run, TestServer, bin};

/// A copy of the test's `evi` installed outside any build folder, and the
/// PATH that finds it first.
pub struct Installed {
    pub path: String,
    pub evi: PathBuf,
}

/// Installs `evi` into `dev`'s folder (`bin/evi`), as `cargo install`
/// would into `~/.cargo/bin`.
pub fn install_evi(dev: &Device) -> Installed {
    let dir = dev.dir.path().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let evi = dir.join("evi");
    std::fs::copy(bin("evi"), &evi).unwrap();
    Installed {
        path: format!("{}:/usr/bin:/bin", dir.display()),
        evi,
    }
}

#[test]
fn watch_install_refuses_the_build_folder_binary_when_none_is_installed() {
    let server = TestServer::start();
    let a = Device::new();
    a.init(&server, "pat", "laptop");
    // The build folder on PATH (as `export PATH=$PWD/target/release:$PATH`
    // does) is no installed evi either.
    let build = bin("evi").parent().unwrap().to_owned();
    let run: Run = a
        .sync_cmd()
        .env("PATH", format!("{}:/usr/bin:/bin", build.display()))
        .args(["sync", "watch", "--install", "--no-enable"])
        .output()
        .unwrap()
        .into();
    assert_eq!(
        (run.code, run.stdout.as_str(), run.stderr.as_str()),
        (
            1,
            "",
            format!(
                "error: this evi is in a build folder ({}), which `cargo clean` deletes and the \
                 next build replaces: a service running it would break\n\
                 hint: install evi first: `cargo install --path cli` (into ~/.cargo/bin, which \
                 must be on PATH), then run `evi sync watch --install` again\n",
                bin("evi").display()
            )
            .as_str()
        )
    );
    assert!(
        !a.dir.path().join(".config/systemd").exists(),
        "no unit is written"
    );
}
