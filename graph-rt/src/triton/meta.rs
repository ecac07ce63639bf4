//! What Triton records about a compiled kernel: the metadata JSON of its cache entry, and the
//! specialization (which arguments it compiled as divisible by 16) from the kernel's TTIR.

use serde_json::Value;

use crate::error::{Error, Misuse, Result};

/// The launch-relevant fields of a Triton cache entry's metadata JSON (`<kernel>.json`), as
/// Triton 3.3–3.6 write them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TritonMetadata {
    /// The kernel's (entry point's) name.
    pub name: String,
    /// Warps per program: blocks of `32 × num_warps` threads.
    pub num_warps: u32,
    /// CTAs per program (a cluster of that many on the x axis, Triton 3.4+).
    pub num_ctas: u32,
    /// Cluster dimensions as Triton 3.3 records them (`cluster_dims`), if it does.
    pub cluster_dims: Option<[u32; 3]>,
    /// Dynamic shared memory in bytes (above 48 KiB the launcher opts in).
    pub shared: u32,
    /// Global scratch bytes per CTA (a buffer of `programs × num_ctas × size` is passed).
    pub global_scratch_size: u64,
    /// Its alignment.
    pub global_scratch_align: u64,
    /// Profiler scratch bytes per CTA (Triton 3.5+).
    pub profile_scratch_size: u64,
    /// Its alignment.
    pub profile_scratch_align: u64,
    /// Whether Triton launches it with programmatic stream serialization.
    pub launch_pdl: bool,
    /// Whether Triton launches it cooperatively.
    pub launch_cooperative_grid: bool,
    /// How many trailing scratch pointers the kernel takes (2 from Triton 3.5: global and
    /// profile; 1 in 3.3–3.4: global).
    pub scratch_params: usize,
    /// `triton_version`, where recorded.
    pub triton_version: Option<String>,
    /// The target's compute capability (`90`), where recorded.
    pub arch: Option<u32>,
}

impl TritonMetadata {
    /// Parses a metadata JSON; a missing `name` or `num_warps`, or a value of the wrong type, is
    /// an error naming the field.
    pub fn from_json(text: &str) -> Result<Self> {
        const CALL: &str = "TritonMetadata::from_json";
        let malformed = |reason: String| Error::misuse(CALL, Misuse::Malformed, reason);
        let v: Value =
            serde_json::from_str(text).map_err(|e| malformed(format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| malformed("not a JSON object".into()))?;
        let bad = |field: &str, what: &str| malformed(format!("field `{field}`: {what}"));
        let uint = |field: &str, default: Option<u64>| -> Result<u64> {
            match obj.get(field) {
                None | Some(Value::Null) => default.ok_or_else(|| bad(field, "missing")),
                Some(v) => v
                    .as_u64()
                    .ok_or_else(|| bad(field, "not a non-negative integer")),
            }
        };
        let flag = |field: &str| -> Result<bool> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(false),
                Some(v) => v.as_bool().ok_or_else(|| bad(field, "not a boolean")),
            }
        };
        let u32_of = |field: &str, v: u64| u32::try_from(v).map_err(|_| bad(field, "too large"));
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("name", "missing or not a string"))?
            .to_string();
        let cluster_dims = match obj.get("cluster_dims") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) if a.len() == 3 => {
                let mut d = [1u32; 3];
                for (slot, x) in d.iter_mut().zip(a) {
                    let x = x
                        .as_u64()
                        .ok_or_else(|| bad("cluster_dims", "not integers"))?;
                    *slot = u32_of("cluster_dims", x)?;
                }
                Some(d)
            }
            Some(_) => return Err(bad("cluster_dims", "not three integers")),
        };
        let scratch_params = if obj.contains_key("profile_scratch_size") {
            2
        } else if obj.contains_key("global_scratch_size") {
            1
        } else {
            0
        };
        let arch = match obj.get("target").and_then(|t| t.get("arch")) {
            Some(a) => Some(u32_of("target.arch", a.as_u64().unwrap_or(0))?),
            None => None,
        };
        let m = Self {
            name,
            num_warps: u32_of("num_warps", uint("num_warps", None)?)?,
            num_ctas: u32_of("num_ctas", uint("num_ctas", Some(1))?)?,
            cluster_dims,
            shared: u32_of("shared", uint("shared", Some(0))?)?,
            global_scratch_size: uint("global_scratch_size", Some(0))?,
            global_scratch_align: uint("global_scratch_align", Some(1))?,
            profile_scratch_size: uint("profile_scratch_size", Some(0))?,
            profile_scratch_align: uint("profile_scratch_align", Some(1))?,
            launch_pdl: flag("launch_pdl")?,
            launch_cooperative_grid: flag("launch_cooperative_grid")?,
            scratch_params,
            triton_version: obj
                .get("triton_version")
                .and_then(Value::as_str)
                .map(str::to_string),
            arch,
        };
        if m.num_warps == 0 || m.num_warps > 32 {
            return Err(bad("num_warps", "not in 1..=32"));
        }
        if m.num_ctas == 0 || m.cluster_dims.is_some_and(|d| d.contains(&0)) {
            return Err(bad("num_ctas", "zero CTAs per program"));
        }
        // A cluster holds at most 16 CTAs (non-portable sizes included).
        let ctas = m.cluster_dims.map_or(Some(m.num_ctas), |d| {
            d[0].checked_mul(d[1]).and_then(|x| x.checked_mul(d[2]))
        });
        if ctas.is_none_or(|c| c > 16) || m.num_ctas > 16 {
            return Err(bad("num_ctas", "more than 16 CTAs per program"));
        }
        Ok(m)
    }

    /// CTAs per program on each axis: `cluster_dims` where recorded (3.3), else `num_ctas`
    /// on x. (Metadata made by hand, unchecked, may hold dimensions whose product overflows:
    /// they are taken as given.)
    pub fn ctas(&self) -> [u32; 3] {
        match self.cluster_dims {
            Some(d) if d != [1, 1, 1] && !d.contains(&0) => d,
            _ => [self.num_ctas, 1, 1],
        }
    }
}

/// One runtime argument as the kernel's TTIR declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtirArg {
    /// The argument's name in the Python source (`x_ptr`).
    pub name: String,
    /// Its TTIR type (`!tt.ptr<f32>`, `i32`, `f32`, `i1`, ...).
    pub ty: String,
    /// Whether Triton compiled it as divisible by 16 (`tt.divisibility = 16`): for a pointer,
    /// 16-byte aligned; for an integer, a multiple of 16.
    pub divisible_16: bool,
}

/// The runtime arguments of kernel `name` in a TTIR module (`<kernel>.ttir` of Triton's cache):
/// the `tt.func` signature, with the divisibility Triton specialized each argument on. The
/// scratch pointers Triton appends later are not among them.
pub fn ttir_args(ttir: &str, name: &str) -> Result<Vec<TtirArg>> {
    const CALL: &str = "ttir_args";
    let head = format!("@{name}(");
    let start = ttir
        .lines()
        .find(|l| l.trim_start().starts_with("tt.func") && l.contains(&head))
        .ok_or_else(|| {
            let reason = format!("no `tt.func @{name}` in the TTIR");
            Error::misuse(CALL, Misuse::NoSuchKernel, reason)
        })?;
    let malformed = |reason: String| Error::misuse(CALL, Misuse::Malformed, reason);
    let open = start.find(&head).unwrap_or(0) + head.len();
    // The argument list: up to the parenthesis that closes the one after the name.
    let mut depth = 1usize;
    let mut end = None;
    for (i, c) in start[open..].char_indices() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(open + i);
                    break;
                }
            }
            _ => {}
        }
    }
    let list = &start[open..end.ok_or_else(|| malformed("unbalanced signature".into()))?];
    let mut args = Vec::new();
    for part in split_top(list) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let rest = part
            .strip_prefix('%')
            .ok_or_else(|| malformed(format!("argument `{part}` has no %name")))?;
        let (arg_name, rest) = rest
            .split_once(':')
            .ok_or_else(|| malformed(format!("argument `{part}` has no type")))?;
        let rest = rest.trim();
        // The type runs to the attribute dictionary or the location, whichever comes first.
        let ty_end = [rest.find(" {"), rest.find(" loc(")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(rest.len());
        let attrs = rest[ty_end..].split(" loc(").next().unwrap_or("");
        let divisible_16 = attrs
            .split([',', '{', '}'])
            .any(|a| a.trim().starts_with("tt.divisibility = 16"));
        args.push(TtirArg {
            name: arg_name.trim().to_string(),
            ty: rest[..ty_end].trim().to_string(),
            divisible_16,
        });
    }
    Ok(args)
}

/// Splits at commas outside brackets, braces, parentheses and angle brackets.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '<' | '{' | '[' => depth += 1,
            ')' | '>' | '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTIR: &str = r#"module {
  tt.func public @scale_bf16_kernel(%x_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32} loc("x_ptr"(#loc)), %out_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32} loc("out_ptr"(#loc)), %s: f32 loc("s"(#loc)), %n: i32 {tt.divisibility = 16 : i32} loc("n"(#loc)), %flip: i1 loc("flip"(#loc))) attributes {noinline = false} {
"#;

    #[test]
    fn ttir_signature_gives_names_types_and_divisibility() {
        let args = ttir_args(TTIR, "scale_bf16_kernel").unwrap();
        let got: Vec<(&str, &str, bool)> = args
            .iter()
            .map(|a| (a.name.as_str(), a.ty.as_str(), a.divisible_16))
            .collect();
        assert_eq!(
            got,
            [
                ("x_ptr", "!tt.ptr<bf16>", true),
                ("out_ptr", "!tt.ptr<bf16>", true),
                ("s", "f32", false),
                ("n", "i32", true),
                ("flip", "i1", false)
            ]
        );
        let misuse = |r: Result<Vec<TtirArg>>| r.err().and_then(|e| e.misuse_kind().cloned());
        assert_eq!(misuse(ttir_args(TTIR, "other")), Some(Misuse::NoSuchKernel));
        for cut in [
            "tt.func public @k(%a: i32",
            "tt.func public @k(a: i32) {",
            "tt.func public @k(%a i32) {",
        ] {
            assert_eq!(
                misuse(ttir_args(cut, "k")),
                Some(Misuse::Malformed),
                "{cut}"
            );
        }
    }

    /// Mutated signatures and metadata (bytes replaced, dropped, duplicated, cut) give an answer
    /// or an error, never a panic.
    #[test]
    fn mutated_inputs_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(20261130);
        let json = r#"{"name":"k","num_warps":8,"num_ctas":2,"cluster_dims":[2,1,1],"shared":98304,"global_scratch_size":0,"profile_scratch_size":0,"launch_pdl":true,"target":{"arch":90}}"#;
        let pieces = [
            "(",
            ")",
            "{",
            "}",
            "<",
            ">",
            ",",
            "%",
            ":",
            " loc(",
            "tt.divisibility = 16",
            "@k(",
            "\u{e9}",
            "[",
            "]",
            "\"",
            "-1",
            "1e99",
        ];
        for (seed, name) in [(TTIR, "scale_bf16_kernel"), (json, "k")] {
            for _ in 0..20_000 {
                let mut t: Vec<char> = seed.chars().collect();
                for _ in 0..rng.random_range(1..6) {
                    let at = rng.random_range(0..=t.len());
                    match rng.random_range(0..4) {
                        0 if at < t.len() => {
                            t.remove(at);
                        }
                        1 => t
                            .splice(at..at, pieces[rng.random_range(0..pieces.len())].chars())
                            .for_each(drop),
                        2 => t.truncate(at),
                        _ if at < t.len() => {
                            t[at] = pieces[rng.random_range(0..pieces.len())]
                                .chars()
                                .next()
                                .unwrap_or('x')
                        }
                        _ => {}
                    }
                }
                let text: String = t.into_iter().collect();
                let _ = ttir_args(&text, name);
                let _ = TritonMetadata::from_json(&text).map(|m| m.ctas());
            }
        }
    }

    #[test]
    fn metadata_of_each_triton_version() {
        let m36 = TritonMetadata::from_json(
            r#"{"name":"k","num_warps":8,"num_ctas":2,"shared":98304,"global_scratch_size":0,
                "global_scratch_align":1,"profile_scratch_size":0,"profile_scratch_align":1,
                "launch_pdl":true,"launch_cooperative_grid":false,"triton_version":"3.6.0",
                "target":{"backend":"cuda","arch":90,"warp_size":32}}"#,
        )
        .unwrap();
        assert_eq!(
            (
                m36.num_warps,
                m36.ctas(),
                m36.shared,
                m36.scratch_params,
                m36.arch
            ),
            (8, [2, 1, 1], 98304, 2, Some(90))
        );
        assert!(m36.launch_pdl);
        let m33 = TritonMetadata::from_json(
            r#"{"name":"k","num_warps":4,"num_ctas":1,"cluster_dims":[2,1,1],"shared":0,
                "global_scratch_size":128,"global_scratch_align":128}"#,
        )
        .unwrap();
        assert_eq!((m33.ctas(), m33.scratch_params), ([2, 1, 1], 1));
        // Made by hand, unchecked: dimensions whose product overflows are taken as given.
        let huge = TritonMetadata {
            cluster_dims: Some([65536, 65536, 2]),
            ..m33.clone()
        };
        assert_eq!(huge.ctas(), [65536, 65536, 2]);
        let one = TritonMetadata {
            cluster_dims: Some([1, 1, 1]),
            num_ctas: 4,
            ..m33.clone()
        };
        assert_eq!(one.ctas(), [4, 1, 1]);
        for bad in [
            "[]",
            "{}",
            r#"{"name":"k"}"#,
            r#"{"name":"k","num_warps":0}"#,
            r#"{"name":"k","num_warps":4,"shared":-1}"#,
            r#"{"name":"k","num_warps":4,"cluster_dims":[1,0,1]}"#,
            r#"{"name":"k","num_warps":4,"cluster_dims":[65536,65536,1]}"#,
            r#"{"name":"k","num_warps":4,"num_ctas":32}"#,
            "not json",
        ] {
            let e = TritonMetadata::from_json(bad).unwrap_err();
            assert_eq!(e.misuse_kind(), Some(&Misuse::Malformed), "{bad}: {e}");
        }
    }
}
