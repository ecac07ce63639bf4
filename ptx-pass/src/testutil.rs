//! Small PTX modules for the unit tests.

/// An nvcc-style module (`sm_70`) with one kernel `k`: `params` (one per line, no commas) and
/// `body` (instructions, one per line) after the usual register declarations.
pub(crate) fn kernel(params: &[&str], body: &[&str]) -> String {
    let params: Vec<String> = params.iter().map(|p| format!("\t.param {p}")).collect();
    let body: String = body.iter().map(|l| format!("\t{l}\n")).collect();
    format!(
        ".version 8.4\n.target sm_70\n.address_size 64\n\n.visible .entry k(\n{}\n)\n{{\n\
         \t.reg .pred \t%p<3>;\n\t.reg .b16 \t%rs<5>;\n\t.reg .b32 \t%r<9>;\n\
         \t.reg .f32 \t%f<5>;\n\t.reg .b64 \t%rd<9>;\n\n{body}\tret;\n}}\n",
        params.join(",\n")
    )
}
