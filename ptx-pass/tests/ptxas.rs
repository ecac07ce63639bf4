//! Every rewritten fixture assembles: `PTXAS=/path/to/ptxas cargo test -p graph-rt-ptx --test
//! ptxas -- --ignored`. Modules whose `.version` or target that ptxas does not support are
//! skipped and counted (Triton's `.version 8.7` needs ptxas 12.8, nvcc 13's `.version 9.0`
//! ptxas 13, which has no `sm_70`).

mod common;

use std::process::Command;

use common::{all_scalars, all_valid};
use graph_rt_ptx::{indirect, Options};

fn options(ptx: &[u8]) -> Vec<Options> {
    let all = all_scalars(ptx);
    let pdl = |o: &Options| Options {
        pdl: true,
        ..o.clone()
    };
    vec![Options::default(), pdl(&Options::default()), pdl(&all), all]
}

#[test]
#[ignore = "needs ptxas: set PTXAS=/path/to/ptxas"]
fn rewritten_fixtures_assemble() {
    let ptxas = std::env::var("PTXAS").expect("set PTXAS to a ptxas binary");
    let dir = std::env::temp_dir().join(format!("graph-rt-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (mut assembled, mut skipped) = (0, 0);
    for (name, ptx) in all_valid() {
        for (i, o) in options(ptx).iter().enumerate() {
            let Ok(out) = indirect(ptx, o) else {
                assert!(o.pdl, "{name}: rewrite {i} failed");
                continue;
            };
            let target = out
                .ptx
                .lines()
                .find_map(|l| l.strip_prefix(".target "))
                .unwrap();
            let arch = target.split([',', ' ']).next().unwrap();
            let path = dir.join(format!("{name}.{i}.ptx"));
            std::fs::write(&path, &out.ptx).unwrap();
            let run = Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&path)
                .args(["-o", "/dev/null"])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&run.stderr);
            if run.status.success() {
                assembled += 1;
            } else if stderr.contains("Unsupported .version") || stderr.contains("is not defined") {
                skipped += 1;
            } else {
                panic!(
                    "{name} ({o:?}): ptxas failed on {}:\n{stderr}",
                    path.display()
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
    eprintln!("{assembled} assembled, {skipped} skipped for their .version or target");
    assert!(assembled > 0);
}
