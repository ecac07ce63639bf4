//! Kernels that break their context: one that writes to an unmapped address
//! (`CUDA_ERROR_ILLEGAL_ADDRESS`) and one that traps (`CUDA_ERROR_LAUNCH_FAILED`), each in a
//! child process (the error is sticky: the context runs nothing more). The child launches the
//! kernel with graph-rt's work parked behind it (a buffer dropped after a launch that reads it, a
//! graph's exec dropped after its replay), then: the next call that waits returns the sticky
//! error as a typed driver error, every later call too, nothing hangs, and the process exits in
//! bounded time (its exit hook gives up on a context that cannot run anything).
//!
//! A binary of its own: a broken context must not meet other tests.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use graph_rt::{CaptureMode, Context, DeviceBuffer, Error, LaunchConfig, Module, Stream};

const CHILD: &str = "GRAPH_RT_FAULTING_KERNEL";

/// `illegal`: stores to an address no allocation has; `trapper`: executes `trap`; `add1`: the
/// work parked before them.
const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
.visible .entry illegal(.param .u64 p)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    add.u64 %rd2, %rd1, 0x100000000000;
    mov.u32 %r1, 1;
    st.global.u32 [%rd2], %r1;
    ret;
}
.visible .entry trapper()
{
    trap;
    ret;
}
.visible .entry add1(.param .u64 x, .param .u64 y, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    mul.wide.s32 %rd3, %r5, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.f32 %f2, %f1, 0f3F800000;
    st.global.f32 [%rd5], %f2;
DONE:
    ret;
}
"#;

fn sanitized() -> bool {
    std::env::var_os("GRAPH_RT_SANITIZER").is_some()
}

/// The child's work: graph-rt work parked, then the faulting kernel `which`, then calls that
/// must each return the sticky error. Prints what each call returned.
fn child(which: &str) {
    const N: usize = 1 << 20;
    let ctx = Context::new(0).unwrap();
    let stream = Stream::new(&ctx).unwrap();
    let module = Module::from_ptx(&ctx, PTX).unwrap();
    let (add1, bad) = (
        module.function("add1").unwrap(),
        module.function(which).unwrap(),
    );
    let x = DeviceBuffer::from_host(&ctx, &vec![1.0f32; N]).unwrap();
    let y = DeviceBuffer::<f32>::zeroed(&ctx, N).unwrap();
    let cfg = LaunchConfig::for_elements(N, 256);
    let graph = stream
        .capture(CaptureMode::Global, |s| {
            // SAFETY: add1 over N floats of two distinct N-float buffers.
            unsafe { s.launch(&add1, &cfg, (&x, &y, N as u32)) }.map(drop)
        })
        .unwrap();
    let exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    // Parked behind the replay: the exec, its graph, the buffers.
    drop((exec, graph, x));
    let one = LaunchConfig::new(1u32, 1u32);
    let launched = match which {
        // SAFETY: the kernel faults on purpose; the process is a child that expects it.
        "illegal" => unsafe { stream.launch(&bad, &one, (&y,)) },
        // SAFETY: as above.
        _ => unsafe { stream.launch(&bad, &one, ()) },
    };
    println!("child: launch: {launched:?}");
    let started = Instant::now();
    let waited = stream.synchronize();
    println!("child: synchronize: {}", describe(&waited));
    let next = DeviceBuffer::<f32>::zeroed(&ctx, 16).map(drop);
    println!("child: next call: {}", describe(&next));
    let again = stream.synchronize();
    println!("child: synchronize again: {}", describe(&again));
    let polled = ctx.poll();
    println!("child: poll: {polled:?}");
    drop((y, bad, add1, module, stream));
    println!("child: dropped, {} ms", started.elapsed().as_millis());
    let deferred = ctx.take_deferred_errors();
    println!("child: deferred errors: {}", deferred.len());
    drop(ctx);
    println!("child: returning");
}

/// A result as `ok`, or the driver error's call and code name.
fn describe(r: &graph_rt::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(Error::Driver { call, name, .. }) => format!("driver error {call} {name}"),
        Err(e) => format!("other error {e}"),
    }
}

/// Runs the child for `which` and checks what it printed, with `expected` the sticky codes the
/// driver may give.
fn run_child(which: &str, expected: &[&str]) {
    if sanitized() {
        eprintln!("faulting kernels: not under a sanitizer (it would report the fault itself)");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args([
            "--include-ignored",
            "--exact",
            "child_process",
            "--nocapture",
        ])
        .env(CHILD, which)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("the child did not exit within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let context = format!(
        "status {status:?} after {:?}\nstdout:\n{out}\nstderr:\n{err}",
        started.elapsed()
    );
    println!("{context}");
    assert!(status.success() && out.contains("1 passed"), "{context}");
    let line = |prefix: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?}\n{context}"))
            .to_owned()
    };
    // The sticky error comes back, typed, from the first call that waits and from every call
    // after it.
    for prefix in [
        "child: synchronize: ",
        "child: next call: ",
        "child: synchronize again: ",
    ] {
        let got = line(prefix);
        let sticky = expected.iter().any(|code| got.contains(code));
        assert!(
            got.starts_with("driver error") && sticky,
            "{prefix}{got}\n{context}"
        );
    }
    line("child: returning");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_that_writes_to_an_unmapped_address_is_a_typed_error_and_the_process_exits() {
    run_child("illegal", &["CUDA_ERROR_ILLEGAL_ADDRESS"]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_kernel_that_traps_is_a_typed_error_and_the_process_exits() {
    // A trap is "unspecified launch failure" on most drivers.
    run_child(
        "trapper",
        &["CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION"],
    );
}

/// The child's side (does nothing unless the parent set the variable).
#[test]
#[ignore = "needs a CUDA GPU"]
fn child_process() {
    if let Ok(which) = std::env::var(CHILD) {
        child(&which);
    }
}
