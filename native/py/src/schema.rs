//! The registry's schema data handed over by Python (protocol.registry's MESSAGES, HEADERS and
//! DATA) copied into the core's schema tree.
use std::collections::HashMap;
use std::rc::Rc;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

pub use kafkawire_core::schema::*;

fn range(obj: Option<Bound<'_, PyAny>>) -> PyResult<Option<Range>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => {
            let lo: i64 = o.get_item(0)?.extract()?;
            let hi: i64 = o.get_item(1)?.extract()?;
            Ok(Some((lo, hi)))
        }
    }
}

fn raw_fields(list: &Bound<'_, PyAny>) -> PyResult<Vec<RawField>> {
    let py = list.py();
    let mut out = Vec::new();
    for f in list.try_iter()? {
        let f = f?;
        let f = f.cast::<PyDict>()?;
        let name: String = f
            .get_item(intern!(py, "name"))?
            .map(|o| o.extract())
            .transpose()?
            .unwrap_or_default();
        let ty_name: String = f
            .get_item(intern!(py, "type"))?
            .map(|o| o.extract())
            .transpose()?
            .unwrap_or_default();
        let ty = match ty_name.as_str() {
            "int8" => Ty::Fixed(Fixed::I8),
            "int16" => Ty::Fixed(Fixed::I16),
            "uint16" => Ty::Fixed(Fixed::U16),
            "int32" => Ty::Fixed(Fixed::I32),
            "uint32" => Ty::Fixed(Fixed::U32),
            "int64" => Ty::Fixed(Fixed::I64),
            "float64" => Ty::Fixed(Fixed::F64),
            "bool" => Ty::Fixed(Fixed::Bool),
            "uuid" => Ty::Fixed(Fixed::Uuid),
            "string" => Ty::Str,
            "bytes" => Ty::Bytes,
            "records" => Ty::Records,
            "struct" => Ty::Struct,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "field {name}: unknown type {other:?}"
                )));
            }
        };
        let array = match f.get_item(intern!(py, "array"))? {
            Some(a) => a.is_truthy()?,
            None => false,
        };
        let tag_obj = f.get_item(intern!(py, "tag"))?;
        let has_tag = tag_obj.is_some();
        let tag = match tag_obj {
            Some(t) if !t.is_none() => t.extract()?,
            _ => -1,
        };
        let flexible = match f.get_item(intern!(py, "flexible"))? {
            Some(o) => Some(range(Some(o))?),
            None => None,
        };
        let fields = match f.get_item(intern!(py, "fields"))? {
            Some(sub) if !sub.is_none() => raw_fields(&sub)?,
            _ => Vec::new(),
        };
        out.push(RawField {
            key: key_id(&name),
            versions: range(f.get_item(intern!(py, "versions"))?)?,
            ty,
            array,
            nullable: range(f.get_item(intern!(py, "nullable"))?)?,
            tagged: range(f.get_item(intern!(py, "tagged"))?)?,
            has_tag,
            tag,
            flexible,
            fields,
            name,
        });
    }
    Ok(out)
}

fn raw_seg(seg: &Bound<'_, PyAny>) -> PyResult<(RawSeg, Vec<i64>)> {
    let py = seg.py();
    let versions: Vec<i64> = seg.get_item(intern!(py, "versions"))?.extract()?;
    let flexible = range(Some(seg.get_item(intern!(py, "flexible"))?))?;
    let fields = Rc::new(raw_fields(&seg.get_item(intern!(py, "fields"))?)?);
    Ok((RawSeg { flexible, fields }, versions))
}

/// messages, headers, data: protocol.registry.MESSAGES, HEADERS and DATA (None: no nested
/// payload is decoded).
pub fn registry(
    messages: &Bound<'_, PyAny>,
    headers: &Bound<'_, PyAny>,
    data: Option<&Bound<'_, PyAny>>,
) -> PyResult<Registry> {
    let mut all = Vec::new();
    for (k, segments) in messages.cast::<PyDict>()?.iter() {
        let api_key: i64 = k.get_item(0)?.extract()?;
        let dir_name: String = k.get_item(1)?.extract()?;
        let Some(dir) = direction(&dir_name) else {
            continue;
        };
        let mut list = Vec::new();
        for seg in segments.try_iter()? {
            list.push(raw_seg(&seg?)?);
        }
        all.push((api_key, dir, list));
    }
    // registry.header_codec() reads the first segment, whatever the header version
    let first =
        |name: &str| -> PyResult<RawSeg> { Ok(raw_seg(&headers.get_item(name)?.get_item(0)?)?.0) };
    let request_header = first("RequestHeader")?;
    let response_header = first("ResponseHeader")?;
    let mut data_segs = HashMap::new();
    if let Some(data) = data {
        for (name, segments) in data.cast::<PyDict>()?.iter() {
            let mut list = Vec::new();
            for seg in segments.try_iter()? {
                let (raw, versions) = raw_seg(&seg?)?;
                list.push((versions, raw));
            }
            data_segs.insert(name.extract::<String>()?, list);
        }
    }
    Ok(Registry::new(
        all,
        request_header,
        response_header,
        data_segs,
    ))
}
