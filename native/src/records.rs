//! Placeholder until the record-data port lands: every record field is Python's.

pub struct FieldTotals {
    pub count: i64,
    pub uncompressed: i64,
    pub codecs: Vec<String>,
    pub producer: Option<i64>,
}

pub fn field_totals(_data: &[u8], _max_decompressed: usize) -> Option<FieldTotals> {
    None
}
