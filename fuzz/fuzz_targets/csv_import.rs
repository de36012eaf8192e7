//! Reads arbitrary files as a contacts import does: the header, then every record as a row.
//! Never a panic.
#![no_main]

use herald_content::csv::{columns, row, strip_bom};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(cols) = columns(data) else {
        return;
    };
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(strip_bom(data));
    for record in reader.records().flatten() {
        let _ = row(&cols, &record);
    }
});
