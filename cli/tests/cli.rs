//! The `graph-rt` binary: on a machine without a driver it exits non-zero with one line that says
//! why, and no backtrace; with one, it succeeds.

use std::process::Command;

fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd.env("RUST_BACKTRACE", "1").output().expect("spawn");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn driver_present() -> bool {
    graph_rt::sys::driver().is_ok()
}

#[test]
fn info_reports_the_driver_or_says_why_not() {
    // The GPU suite runs this test away from the build tree and says where the binary is.
    let bin =
        std::env::var("GRAPH_RT_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_graph-rt").to_owned());
    let (ok, stdout, stderr) = run(Command::new(bin).arg("info"));
    if driver_present() {
        assert!(ok, "{stderr}");
        assert!(
            stdout.contains("driver: CUDA") && stdout.contains("graph features"),
            "{stdout}"
        );
    } else {
        assert!(!ok);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("libcuda.so.1") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
}
