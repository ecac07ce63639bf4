//! Argument checks against parameters and specialization, with no GPU.

use super::arg::TritonArg;
use super::check::check_args;
use super::kernel::TritonParam;
use crate::error::Misuse;

/// The misuse `r` failed with (none: it did not fail, or not with a misuse).
fn misuse<T>(r: crate::Result<T>) -> Option<Misuse> {
    r.err().and_then(|e| e.misuse_kind().cloned())
}

fn param(name: &str, pointer: bool, size: usize, float: bool, div16: bool) -> TritonParam {
    TritonParam {
        name: name.into(),
        pointer,
        size,
        float,
        divisible_16: div16,
        slot: false,
    }
}

#[test]
fn arguments_are_checked_against_kind_size_and_specialization() {
    let params = [
        param("x_ptr", true, 8, false, true),
        param("s", false, 4, true, false),
        param("n", false, 4, false, true),
        param("flip", false, 1, false, false),
    ];
    let ok = |p: u64, n: i32| {
        // SAFETY: never launched.
        let ptr = unsafe { TritonArg::raw_pointer(p) };
        check_args(
            &params,
            &[
                ptr,
                TritonArg::f32(0.5),
                TritonArg::i32(n),
                TritonArg::bool(true),
            ],
        )
    };
    ok(0x1000, 4096).unwrap();
    ok(0x1000, -32).unwrap();
    // A misaligned pointer, and an integer that breaks the divisibility Triton compiled for.
    let breaks = |index| Some(Misuse::Specialization { index });
    assert_eq!(misuse(ok(0x1004, 4096)), breaks(0));
    assert_eq!(misuse(ok(0x1000, 4100)), breaks(2));
    // Wrong kinds and sizes (of the argument at `index`), too few arguments.
    // SAFETY: never launched.
    let p = || unsafe { TritonArg::raw_pointer(0x1000) };
    let wrong = |index| Some(Misuse::WrongArgument { index });
    for (bad, want) in [
        (
            vec![
                p(),
                TritonArg::i32(1),
                TritonArg::i32(16),
                TritonArg::bool(true),
            ],
            wrong(1),
        ),
        (
            vec![
                p(),
                TritonArg::f64(0.5),
                TritonArg::i32(16),
                TritonArg::bool(true),
            ],
            wrong(1),
        ),
        (
            vec![
                p(),
                TritonArg::f32(0.5),
                TritonArg::i64(16),
                TritonArg::bool(true),
            ],
            wrong(2),
        ),
        (
            vec![
                TritonArg::u64(0x1000),
                TritonArg::f32(0.5),
                TritonArg::i32(16),
                TritonArg::bool(true),
            ],
            wrong(0),
        ),
        (
            vec![p(), TritonArg::f32(0.5), TritonArg::i32(16)],
            Some(Misuse::CountMismatch {
                expected: 4,
                got: 3,
            }),
        ),
    ] {
        assert_eq!(misuse(check_args(&params, &bad)), want, "{bad:?}");
    }
}

#[test]
fn cache_files_are_read_by_name_and_missing_ones_said() {
    use super::files::TritonFiles;
    let dir = std::env::temp_dir().join(format!("graph-rt-triton-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // No metadata: an error naming the path.
    let e = TritonFiles::read(&dir, "k").unwrap_err().to_string();
    assert!(e.contains("k.json"), "{e}");
    std::fs::write(dir.join("k.json"), r#"{"name":"k","num_warps":4}"#).unwrap();
    std::fs::write(dir.join("k.ttir"), "tt.func public @k(%a: i32) {").unwrap();
    let f = TritonFiles::read(&dir, "k").unwrap();
    assert!(f.metadata.contains("num_warps"));
    assert!(f.ptx.is_none() && f.cubin.is_none() && f.ttir.is_some());
    // PTX that is not UTF-8 is an error, not a panic.
    std::fs::write(dir.join("k.ptx"), [0xff, 0xfe, 0x00]).unwrap();
    assert_eq!(
        misuse(TritonFiles::read(&dir, "k")),
        Some(Misuse::Malformed)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cubin cut short (a hand-built `TritonFiles`, Triton interrupted mid-write, a full disk) is
/// refused by what `TritonKernel::load` does before its first driver call.
#[test]
fn a_cubin_cut_short_is_refused_before_any_driver_call() {
    use super::files::TritonFiles;
    use super::kernel::read;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../triton-fixtures/add");
    let mut files = TritonFiles::read(std::path::Path::new(dir), "add_kernel").unwrap();
    let whole = files.cubin.clone().unwrap();
    read(&files).unwrap();
    for (cubin, says) in [
        (
            b"\x7fELF".to_vec(),
            "add_kernel.cubin (4 bytes, a cubin): shorter than an ELF header (64 bytes)",
        ),
        (whole[..whole.len() / 2].to_vec(), "table ends at byte"),
    ] {
        files.cubin = Some(cubin);
        let e = read(&files).err().expect("accepted a cubin cut short");
        assert_eq!(e.misuse_kind(), Some(&Misuse::MalformedImage), "{e}");
        assert_eq!(e.call(), Some("TritonKernel::load"));
        assert!(e.to_string().contains(says), "{e}");
    }
}

/// A fresh cache folder holding `k.json`.
fn cache(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("graph-rt-triton-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k.json"), b"{}").unwrap();
    dir
}

#[test]
fn kernel_names_that_leave_the_cache_folder_are_refused_before_any_read() {
    use super::TritonFiles;
    let dir = cache("names");
    // A metadata file one level up, which `../` would reach.
    let outside = dir
        .parent()
        .unwrap()
        .join(format!("graph-rt-outside-{}.json", std::process::id()));
    std::fs::write(&outside, b"{}").unwrap();
    let escape = format!("../{}", outside.file_stem().unwrap().to_string_lossy());
    for name in [
        escape.as_str(),
        "..",
        ".",
        "",
        "a/b",
        "/etc/passwd",
        "a\\b",
        "x..y",
    ] {
        assert_eq!(
            misuse(TritonFiles::read(&dir, name)),
            Some(Misuse::BadFileName),
            "{name:?}"
        );
    }
    assert_eq!(
        misuse(TritonFiles::read(&dir, "k\0")),
        Some(Misuse::NulByte)
    );
    assert_eq!(TritonFiles::read(&dir, "k").unwrap().metadata, "{}");
    std::fs::remove_file(&outside).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_fifo_or_a_folder_in_the_cache_is_refused_promptly() {
    use super::TritonFiles;
    let dir = cache("fifo");
    let c = std::ffi::CString::new(dir.join("k.ptx").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let d = dir.clone();
    std::thread::spawn(move || tx.send(misuse(TritonFiles::read(&d, "k"))));
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("TritonFiles::read blocked on a FIFO");
    assert_eq!(got, Some(Misuse::UntrustedFile));
    std::fs::remove_file(dir.join("k.ptx")).unwrap();
    std::fs::create_dir(dir.join("k.cubin")).unwrap();
    let e = TritonFiles::read(&dir, "k").unwrap_err();
    assert_eq!(e.misuse_kind(), Some(&Misuse::UntrustedFile));
    assert!(e.to_string().contains("k.cubin is a folder"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn oversized_or_linked_cache_files_are_refused() {
    use super::TritonFiles;
    let dir = cache("large");
    // Sparse: over the 256 MiB cap without taking the disk.
    std::fs::File::create(dir.join("k.ttir"))
        .unwrap()
        .set_len(300 << 20)
        .unwrap();
    assert_eq!(
        misuse(TritonFiles::read(&dir, "k")),
        Some(Misuse::TooLarge { what: "file" })
    );
    std::fs::remove_file(dir.join("k.ttir")).unwrap();
    std::fs::File::create(dir.join("k.json"))
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    assert_eq!(
        misuse(TritonFiles::read(&dir, "k")),
        Some(Misuse::TooLarge { what: "file" })
    );
    std::fs::remove_file(dir.join("k.json")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("k.json")).unwrap();
    assert_eq!(
        misuse(TritonFiles::read(&dir, "k")),
        Some(Misuse::UntrustedFile)
    );
    // No metadata at all: the file system's failure, not a misuse.
    std::fs::remove_file(dir.join("k.json")).unwrap();
    let e = TritonFiles::read(&dir, "k").unwrap_err();
    assert_eq!(e.misuse_kind(), None, "{e}");
    assert!(e.to_string().contains("k.json does not exist"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
