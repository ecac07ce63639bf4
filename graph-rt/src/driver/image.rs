//! The framing check of binary images (cubins, fatbins) before the driver reads them:
//! `cuModuleLoadData` takes no length and follows the offsets in the image's headers, so an
//! image cut short (an interrupted write, a full disk) or with a header that points past its end
//! would make the driver read memory past the slice.
//!
//! A cubin (ELF64, little-endian) passes when its ELF header, program headers and section
//! headers lie within it, so do the bytes of every section (but `SHT_NOBITS`, which has none)
//! and segment, its string tables end with a NUL within their section (a name read stops inside
//! them), every section's name starts inside the section-name table, and its symbol and
//! relocation tables have entries of their ELF size. A fatbin passes when its 16-byte header and
//! the `fatSize` bytes it announces lie within it: the layout of the entries that follow is
//! NVIDIA's, unpublished, so they are not walked (the driver bounds them by `fatSize`).
//!
//! What the sections hold (code, symbols, attributes) is the driver's to judge, as PTX text is
//! the JIT compiler's.

use crate::error::{Error, Misuse, Result};

/// The formats the driver loads from memory, told by their magic numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// An ELF image for one architecture (`\x7fELF`).
    Cubin,
    /// A container of cubins and PTX (magic `0xBA55ED50`, little-endian).
    Fatbin,
}

pub(crate) const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
pub(crate) const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();

const EHDR: u64 = 64;
const PHDR: u64 = 56;
const SHDR: u64 = 64;
const FATBIN_HEADER: u64 = 16;

const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_RELA: u32 = 4;
const SHT_NOBITS: u32 = 8;
const SHT_REL: u32 = 9;
// Numbers that say the real count or index is in section 0 (ELF extended numbering), which
// cubins never use.
const SHN_XINDEX: u16 = 0xffff;
const PN_XNUM: u16 = 0xffff;

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Cubin => "cubin",
            Format::Fatbin => "fatbin",
        }
    }
}

/// The format of `image` by its magic number, or `None` for neither.
pub(crate) fn format_of(image: &[u8]) -> Option<Format> {
    if image.starts_with(ELF_MAGIC) {
        Some(Format::Cubin)
    } else if image.starts_with(&FATBIN_MAGIC) {
        Some(Format::Fatbin)
    } else {
        None
    }
}

/// Checks the framing of `image` (see the module's docs) and returns its format. `what` names
/// the image in the error (a file, "the image"); `call` is the call that refuses it. A wrong
/// magic number is [`Misuse::WrongImage`], any other fault [`Misuse::MalformedImage`].
pub(crate) fn check_image(call: &'static str, what: &str, image: &[u8]) -> Result<Format> {
    let Some(format) = format_of(image) else {
        return Err(Error::misuse(
            call,
            Misuse::WrongImage,
            format!("{what} is neither a cubin (ELF) nor a fatbin: wrong magic number"),
        ));
    };
    let fault = match format {
        Format::Cubin => elf_fault(image),
        Format::Fatbin => fatbin_fault(image),
    };
    match fault {
        None => Ok(format),
        Some(fault) => Err(Error::misuse(
            call,
            Misuse::MalformedImage,
            format!(
                "{what} ({} bytes, a {}): {fault}; give the whole image as its compiler wrote it (an interrupted write or a full disk leaves a file cut short)",
                image.len(),
                format.name()
            ),
        )),
    }
}

/// The little-endian integer of `N` bytes at `at` (0 beyond the end: callers check bounds
/// first, this only keeps a slip from panicking).
fn le<const N: usize>(b: &[u8], at: u64) -> u64 {
    let bytes = usize::try_from(at)
        .ok()
        .and_then(|at| b.get(at..at.checked_add(N)?));
    bytes.map_or(0, |s| {
        s.iter()
            .rev()
            .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte))
    })
}

/// `start + len`, where it is at most `total`; else why not, naming `what`.
fn within(what: &str, start: u64, len: u64, total: u64) -> std::result::Result<(), String> {
    match start.checked_add(len) {
        Some(end) if end <= total => Ok(()),
        Some(end) => Err(format!(
            "{what} ends at byte {end}, past the end of the {total}-byte image"
        )),
        None => Err(format!(
            "{what} starts at byte {start} and holds {len} bytes, beyond any image's end"
        )),
    }
}

fn elf_fault(b: &[u8]) -> Option<String> {
    elf_check(b).err()
}

fn elf_check(b: &[u8]) -> std::result::Result<(), String> {
    let total = b.len() as u64;
    if total < EHDR {
        return Err(format!("shorter than an ELF header ({EHDR} bytes)"));
    }
    if b[4] != 2 || b[5] != 1 {
        return Err(format!(
            "not a 64-bit little-endian ELF (class {}, data encoding {}), as cubins are",
            b[4], b[5]
        ));
    }
    let ehsize = le::<2>(b, 52);
    if ehsize < EHDR {
        return Err(format!(
            "its ELF header says it is {ehsize} bytes, less than {EHDR}"
        ));
    }
    within("the ELF header", 0, ehsize, total)?;

    let phoff = le::<8>(b, 32);
    let phentsize = le::<2>(b, 54);
    let phnum = le::<2>(b, 56);
    if phnum == u64::from(PN_XNUM) {
        return Err("its program header count is in section 0 (extended numbering), which cubins do not use".into());
    }
    if phnum > 0 {
        if phentsize < PHDR {
            return Err(format!(
                "its program headers are {phentsize} bytes each, less than {PHDR}"
            ));
        }
        within("the program header table", phoff, phnum * phentsize, total)?;
    }
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        within(
            &format!("segment {i}"),
            le::<8>(b, at + 8),
            le::<8>(b, at + 32),
            total,
        )?;
    }

    let shoff = le::<8>(b, 40);
    let shentsize = le::<2>(b, 58);
    let shnum = le::<2>(b, 60);
    let shstrndx = le::<2>(b, 62);
    if shnum == 0 {
        if shoff != 0 {
            return Err(
                "its section count is in section 0 (extended numbering), which cubins do not use"
                    .into(),
            );
        }
        if shstrndx != 0 {
            return Err(format!(
                "it names section {shstrndx} as its section-name table, but has no section"
            ));
        }
        return Ok(());
    }
    if shstrndx == u64::from(SHN_XINDEX) {
        return Err("its section-name table's index is in section 0 (extended numbering), which cubins do not use".into());
    }
    if shentsize < SHDR {
        return Err(format!(
            "its section headers are {shentsize} bytes each, less than {SHDR}"
        ));
    }
    within("the section header table", shoff, shnum * shentsize, total)?;
    if shstrndx >= shnum {
        return Err(format!(
            "it names section {shstrndx} as its section-name table, but has {shnum} sections"
        ));
    }
    // Section i's header: (type, offset, size, link, entry size).
    let header = |i: u64| {
        let at = shoff + i * shentsize;
        (
            le::<4>(b, at + 4) as u32,
            le::<8>(b, at + 24),
            le::<8>(b, at + 32),
            le::<4>(b, at + 40),
            le::<8>(b, at + 56),
        )
    };
    for i in 0..shnum {
        let (ty, offset, size, link, entsize) = header(i);
        if ty == SHT_NOBITS {
            continue;
        }
        within(&format!("section {i}"), offset, size, total)?;
        match ty {
            SHT_STRTAB if size > 0 && le::<1>(b, offset + size - 1) != 0 => {
                return Err(format!(
                    "section {i} (a string table) does not end with a NUL byte"
                ));
            }
            SHT_SYMTAB | SHT_RELA | SHT_REL => {
                let (kind, want) = match ty {
                    SHT_SYMTAB => ("a symbol table", 24),
                    SHT_RELA => ("a relocation table", 24),
                    _ => ("a relocation table", 16),
                };
                if entsize != want {
                    return Err(format!(
                        "section {i} ({kind}) has entries of {entsize} bytes, not {want}"
                    ));
                }
                if link >= shnum {
                    return Err(format!(
                        "section {i} ({kind}) links section {link}, but there are {shnum} sections"
                    ));
                }
            }
            _ => {}
        }
    }
    if shstrndx != 0 {
        let (ty, _, names, _, _) = header(shstrndx);
        if ty != SHT_STRTAB || names == 0 {
            return Err(format!(
                "its section-name table (section {shstrndx}) is not a string table"
            ));
        }
        for i in 0..shnum {
            let name = le::<4>(b, shoff + i * shentsize);
            if name >= names {
                return Err(format!(
                    "section {i}'s name starts at byte {name} of a {names}-byte section-name table"
                ));
            }
        }
    }
    Ok(())
}

fn fatbin_fault(b: &[u8]) -> Option<String> {
    let total = b.len() as u64;
    if total < FATBIN_HEADER {
        return Some(format!(
            "shorter than a fatbin header ({FATBIN_HEADER} bytes)"
        ));
    }
    let header = le::<2>(b, 6);
    if header < FATBIN_HEADER {
        return Some(format!(
            "its header says it is {header} bytes, less than {FATBIN_HEADER}"
        ));
    }
    within("the fatbin's payload", header, le::<8>(b, 8), total).err()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The misuse and reason `image` is refused with (none: accepted).
    fn refusal(image: &[u8]) -> Option<(Misuse, String)> {
        match check_image("test", "the image", image) {
            Ok(_) => None,
            Err(Error::Misuse { misuse, reason, .. }) => Some((misuse, reason)),
            Err(e) => panic!("not a misuse: {e}"),
        }
    }

    fn malformed(image: &[u8], says: &str) {
        let (misuse, reason) = refusal(image).expect("accepted");
        assert_eq!(misuse, Misuse::MalformedImage, "{reason}");
        assert!(reason.contains(says), "{reason:?} does not say {says:?}");
    }

    fn fixture_cubins() -> Vec<(String, Vec<u8>)> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut found = Vec::new();
        for dir in ["triton-fixtures", "kernels/prelude"] {
            let mut stack = vec![std::path::Path::new(root).join(dir)];
            while let Some(d) = stack.pop() {
                for entry in std::fs::read_dir(&d).unwrap() {
                    let p = entry.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|e| e == "cubin") {
                        found.push((p.display().to_string(), std::fs::read(&p).unwrap()));
                    }
                }
            }
        }
        assert!(found.len() >= 10, "fixture cubins: {}", found.len());
        found
    }

    /// The add kernel's cubin, and where its headers sit.
    fn add_cubin() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../triton-fixtures/add/add_kernel.cubin"
        );
        std::fs::read(path).unwrap()
    }

    fn put(b: &mut [u8], at: u64, value: &[u8]) {
        let at = at as usize;
        b[at..at + value.len()].copy_from_slice(value);
    }

    #[test]
    fn real_cubins_pass_and_any_cut_of_them_is_refused() {
        for (path, cubin) in fixture_cubins() {
            assert_eq!(
                check_image("test", &path, &cubin).unwrap(),
                Format::Cubin,
                "{path}"
            );
            // Every cut: headers at the end (section and program header tables) go first.
            for len in [4, 63, 64, cubin.len() / 2, cubin.len() - 1] {
                let (misuse, reason) = refusal(&cubin[..len]).expect(&path);
                assert_eq!(misuse, Misuse::MalformedImage, "{path} at {len}: {reason}");
            }
        }
    }

    #[test]
    fn a_four_byte_cubin_is_refused_as_short() {
        malformed(b"\x7fELF", "shorter than an ELF header (64 bytes)");
        malformed(b"\x7fELF", "(4 bytes, a cubin)");
    }

    #[test]
    fn headers_and_sections_past_the_end_are_refused() {
        let good = add_cubin();
        let total = good.len() as u64;
        let shoff = le::<8>(&good, 40);
        let phoff = le::<8>(&good, 32);

        let mut b = good.clone();
        put(&mut b, 40, &total.to_le_bytes());
        malformed(&b, "the section header table ends at byte");

        let mut b = good.clone();
        put(&mut b, 32, &(total - 8).to_le_bytes());
        malformed(&b, "the program header table ends at byte");

        // Section 7's bytes reach one past the end.
        let mut b = good.clone();
        let sec = shoff + 7 * 64;
        let offset = le::<8>(&good, sec + 24);
        put(&mut b, sec + 32, &(total - offset + 1).to_le_bytes());
        malformed(
            &b,
            &format!(
                "section 7 ends at byte {}, past the end of the {total}-byte image",
                total + 1
            ),
        );

        // A segment's bytes past the end.
        let mut b = good.clone();
        put(&mut b, phoff + 8, &total.to_le_bytes());
        put(&mut b, phoff + 32, &1u64.to_le_bytes());
        malformed(&b, "segment 0 ends at byte");

        // Too many sections for the table to fit.
        let mut b = good.clone();
        put(&mut b, 60, &500u16.to_le_bytes());
        malformed(&b, "the section header table ends at byte");

        // A section-name table index out of range.
        let mut b = good.clone();
        put(&mut b, 62, &200u16.to_le_bytes());
        malformed(&b, "as its section-name table, but has");

        // A 32-bit or big-endian ELF.
        let mut b = good.clone();
        b[4] = 1;
        malformed(&b, "not a 64-bit little-endian ELF");

        // Headers smaller than ELF64's.
        let mut b = good;
        put(&mut b, 58, &40u16.to_le_bytes());
        malformed(&b, "section headers are 40 bytes each");
    }

    #[test]
    fn offsets_that_overflow_are_refused() {
        let good = add_cubin();
        let shoff = le::<8>(&good, 40);
        let phoff = le::<8>(&good, 32);
        for at in [32, 40, shoff + 3 * 64 + 24, phoff + 8] {
            let mut b = good.clone();
            put(&mut b, at, &u64::MAX.to_le_bytes());
            let (misuse, reason) = refusal(&b).expect("accepted");
            assert_eq!(misuse, Misuse::MalformedImage, "{reason}");
        }
        // Size u64::MAX from a valid offset.
        let mut b = good;
        put(&mut b, shoff + 3 * 64 + 32, &u64::MAX.to_le_bytes());
        malformed(&b, "beyond any image's end");
    }

    #[test]
    fn fatbin_headers_are_checked_against_the_length() {
        let fatbin = |header: u16, size: u64, len: usize| {
            let mut b = vec![0u8; len.max(16)];
            b[..4].copy_from_slice(&FATBIN_MAGIC);
            b[4..6].copy_from_slice(&1u16.to_le_bytes());
            b[6..8].copy_from_slice(&header.to_le_bytes());
            b[8..16].copy_from_slice(&size.to_le_bytes());
            b.truncate(len);
            b
        };
        assert_eq!(
            check_image("test", "the image", &fatbin(16, 100, 116)).unwrap(),
            Format::Fatbin
        );
        malformed(
            &fatbin(16, 100, 115),
            "the fatbin's payload ends at byte 116, past the end of the 115-byte image",
        );
        malformed(&fatbin(16, u64::MAX, 64), "beyond any image's end");
        malformed(&fatbin(8, 0, 64), "less than 16");
        malformed(&fatbin(16, 0, 10), "shorter than a fatbin header");
    }

    #[test]
    fn other_bytes_are_the_wrong_image() {
        let (misuse, _) = refusal(b"not an elf").unwrap();
        assert_eq!(misuse, Misuse::WrongImage);
        assert_eq!(refusal(b"").unwrap().0, Misuse::WrongImage);
    }
}
