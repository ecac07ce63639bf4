//! `Module::check_image` on any bytes: it must never panic, and an image it accepts must have
//! every header it says the driver follows inside the bytes. The second half reads the headers
//! again here, independently of graph-rt's checker, so a checker that accepts too much fails.
//! No GPU: the check calls no driver.
#![no_main]

use graph_rt::Module;
use libfuzzer_sys::fuzz_target;

/// The little-endian integer of `n` bytes at `at`; the caller has bounded `at + n`.
fn le(b: &[u8], at: u64, n: usize) -> u64 {
    let at = usize::try_from(at).unwrap();
    b[at..at + n]
        .iter()
        .rev()
        .fold(0, |acc, &byte| (acc << 8) | u64::from(byte))
}

/// Asserts `[start, start + len)` lies within the `total` bytes.
fn inside(what: &str, start: u64, len: u64, total: u64) {
    let end = start.checked_add(len);
    assert!(
        end.is_some_and(|e| e <= total),
        "accepted {what} [{start}, +{len}) in {total} bytes"
    );
}

fn assert_elf_inside(b: &[u8]) {
    let total = b.len() as u64;
    inside("the ELF header", 0, 64, total);
    let (phoff, phentsize, phnum) = (le(b, 32, 8), le(b, 54, 2), le(b, 56, 2));
    if phnum > 0 {
        assert!(phentsize >= 56, "accepted program headers of {phentsize} bytes");
        inside("the program headers", phoff, phnum * phentsize, total);
        for i in 0..phnum {
            let at = phoff + i * phentsize;
            inside("a segment", le(b, at + 8, 8), le(b, at + 32, 8), total);
        }
    }
    let (shoff, shentsize, shnum) = (le(b, 40, 8), le(b, 58, 2), le(b, 60, 2));
    if shnum > 0 {
        assert!(shentsize >= 64, "accepted section headers of {shentsize} bytes");
        inside("the section headers", shoff, shnum * shentsize, total);
        assert!(le(b, 62, 2) < shnum, "accepted e_shstrndx out of range");
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            // SHT_NOBITS sections have no bytes in the file.
            if le(b, at + 4, 4) != 8 {
                inside("a section", le(b, at + 24, 8), le(b, at + 32, 8), total);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if Module::check_image(data).is_err() {
        return;
    }
    if data.starts_with(b"\x7fELF") {
        assert_elf_inside(data);
    } else {
        assert!(data.starts_with(&0xBA55_ED50u32.to_le_bytes()));
        let total = data.len() as u64;
        inside("the fatbin header", 0, 16, total);
        let header = le(data, 6, 2);
        assert!(header >= 16, "accepted a fatbin header of {header} bytes");
        inside("the fatbin's payload", header, le(data, 8, 8), total);
    }
});
