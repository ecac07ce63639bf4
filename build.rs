//! The build script of `graph-rt-dev` (the workspace's examples and benches; not published, so no
//! user's build runs it): stamps them with the commit they were built from, so that a figure a
//! bench prints on the GPU machine — which has neither the source nor git — names its commit.

use std::path::Path;
use std::process::Command;

fn main() {
    // A new commit moves HEAD or the branch it names.
    let git = Path::new(".git");
    println!("cargo:rerun-if-changed=.git/HEAD");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=.git/{branch}");
        }
    }
    println!("cargo:rerun-if-changed=.git/packed-refs");
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = run(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Uncommitted changes to tracked files: the binaries are not that commit alone.
    let dirty =
        run(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let stamp = if dirty {
        format!("{commit}+changes")
    } else {
        commit
    };
    println!("cargo:rustc-env=GRAPH_RT_DEV_COMMIT={stamp}");
}
