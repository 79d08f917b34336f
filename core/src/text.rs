//! Ids as text, for clients that cannot hold a 64-bit integer (JavaScript's numbers are exact
//! only to 2^53; snowflake ids are about 2^57 in 2026): decimal, Crockford base32 and base62.
//! Both base forms are zero-padded to a fixed width (13 and 11 characters), so they sort in the
//! same order as the ids: base32 case-insensitively, base62 byte by byte (`COLLATE "C"`).

use std::fmt;

/// Crockford's base32: digits and capitals without I, L, O, U.
const BASE32: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Digits, capitals, then lower case: ascending in byte order.
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Characters of a 63-bit id in each form.
pub const BASE32_WIDTH: usize = 13;
pub const BASE62_WIDTH: usize = 11;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Decimal,
    Base32,
    Base62,
}

impl Form {
    pub const NAMES: &'static str = "decimal, base32, base62";

    /// The form's name, as SQL functions take it.
    pub fn name(self) -> &'static str {
        match self {
            Form::Decimal => "decimal",
            Form::Base32 => "base32",
            Form::Base62 => "base62",
        }
    }

    pub fn parse(name: &str) -> Option<Form> {
        match name.to_ascii_lowercase().as_str() {
            "decimal" | "dec" => Some(Form::Decimal),
            "base32" | "crockford" => Some(Form::Base32),
            "base62" => Some(Form::Base62),
            _ => None,
        }
    }
}

/// Why a text is not an id in a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadText {
    Empty,
    /// A character that is not a digit of the form, and where it is (0-based, in characters).
    Character {
        found: char,
        at: usize,
    },
    /// A fixed-width form with another number of digits than its width: read as an id, a
    /// short or long text would be another id, so it is refused.
    Length {
        expected: usize,
        found: usize,
    },
    /// A base32 hyphen that does not stand between two digits, and where it is.
    Hyphen {
        at: usize,
    },
    /// More than a positive 64-bit integer holds.
    TooLarge,
    Negative,
}

impl fmt::Display for BadText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadText::Empty => write!(f, "it is empty"),
            BadText::Character { found, at } => {
                write!(
                    f,
                    "'{found}' at position {} is not a digit of the form",
                    at + 1
                )
            }
            BadText::Length { expected, found } => {
                write!(f, "it has {found} digits, not {expected}")
            }
            BadText::Hyphen { at } => write!(
                f,
                "the hyphen at position {} does not separate two digits",
                at + 1
            ),
            BadText::TooLarge => write!(f, "it is larger than the largest id, 9223372036854775807"),
            BadText::Negative => write!(f, "ids are never negative"),
        }
    }
}

pub fn encode(id: i64, form: Form) -> String {
    debug_assert!(id >= 0);
    match form {
        Form::Decimal => id.to_string(),
        Form::Base32 => in_base(id as u64, BASE32, BASE32_WIDTH),
        Form::Base62 => in_base(id as u64, BASE62, BASE62_WIDTH),
    }
}

fn in_base(mut n: u64, digits: &[u8], width: usize) -> String {
    let base = digits.len() as u64;
    let mut out = vec![b'0'; width];
    for slot in out.iter_mut().rev() {
        *slot = digits[(n % base) as usize];
        n /= base;
    }
    debug_assert_eq!(n, 0, "the width holds every 63-bit value");
    String::from_utf8(out).expect("ASCII digits")
}

impl Form {
    /// How many digits a text of this form has: exactly its width for the padded forms,
    /// anything from 1 on for decimal.
    pub fn width(self) -> Option<usize> {
        match self {
            Form::Decimal => None,
            Form::Base32 => Some(BASE32_WIDTH),
            Form::Base62 => Some(BASE62_WIDTH),
        }
    }

    fn base(self) -> u64 {
        match self {
            Form::Decimal => 10,
            Form::Base32 => 32,
            Form::Base62 => 62,
        }
    }

    fn digit(self, c: char) -> Option<u32> {
        match self {
            Form::Decimal => c.to_digit(10),
            Form::Base32 => base32_digit(c),
            Form::Base62 => BASE62
                .iter()
                .position(|&d| d as char == c)
                .map(|d| d as u32),
        }
    }
}

/// Reads an id in `form`, surrounding white space ignored. The padded forms must have exactly
/// their width in digits (base32 may separate them with single hyphens, as Crockford allows):
/// a digit more or less would read as another id.
pub fn decode(text: &str, form: Form) -> Result<i64, BadText> {
    let text = text.trim();
    if text.is_empty() {
        return Err(BadText::Empty);
    }
    if text.starts_with('-') && form == Form::Decimal {
        return Err(BadText::Negative);
    }
    let chars: Vec<char> = text.chars().collect();
    let mut value: u64 = 0;
    let mut digits = 0;
    for (at, &c) in chars.iter().enumerate() {
        if form == Form::Base32 && c == '-' {
            let between =
                at > 0 && chars[at - 1] != '-' && chars.get(at + 1).is_some_and(|&n| n != '-');
            if !between {
                return Err(BadText::Hyphen { at });
            }
            continue;
        }
        let digit = form.digit(c).ok_or(BadText::Character { found: c, at })?;
        digits += 1;
        value = value
            .checked_mul(form.base())
            .and_then(|v| v.checked_add(digit as u64))
            .ok_or(BadText::TooLarge)?;
    }
    if let Some(width) = form.width() {
        if digits != width {
            return Err(BadText::Length {
                expected: width,
                found: digits,
            });
        }
    }
    i64::try_from(value).map_err(|_| BadText::TooLarge)
}

/// Crockford's decoding: case-insensitive, I and L read as 1, O as 0.
fn base32_digit(c: char) -> Option<u32> {
    let c = match c.to_ascii_uppercase() {
        'I' | 'L' => '1',
        'O' => '0',
        c => c,
    };
    BASE32
        .iter()
        .position(|&d| d as char == c)
        .map(|d| d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLES: [i64; 7] = [
        0,
        1,
        31,
        62,
        250_284_542_764_544_000,
        i64::MAX - 1,
        i64::MAX,
    ];

    #[test]
    fn every_form_round_trips() {
        for form in [Form::Decimal, Form::Base32, Form::Base62] {
            for id in SAMPLES {
                assert_eq!(decode(&encode(id, form), form), Ok(id), "{form:?} {id}");
            }
        }
        assert_eq!(encode(i64::MAX, Form::Base32), "7ZZZZZZZZZZZZ");
        assert_eq!(encode(i64::MAX, Form::Base62), "AzL8n0Y58m7");
        assert_eq!(encode(0, Form::Base62), "00000000000");
    }

    #[test]
    fn padded_forms_sort_like_the_ids() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut ids: Vec<i64> = (0..2000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 1) as i64 >> (state % 40)
            })
            .collect();
        ids.extend(SAMPLES);
        ids.sort();
        for form in [Form::Base32, Form::Base62] {
            let texts: Vec<String> = ids.iter().map(|&id| encode(id, form)).collect();
            let mut sorted = texts.clone();
            sorted.sort();
            assert_eq!(texts, sorted, "{form:?} does not sort like the ids");
        }
    }

    #[test]
    fn base32_reads_like_crockford() {
        let id = 250_284_542_764_544_000;
        let text = encode(id, Form::Base32);
        assert_eq!(decode(&text.to_lowercase(), Form::Base32), Ok(id));
        assert_eq!(
            decode("00000000O1IL", Form::Base32).map_err(|_| ()),
            Err(())
        );
        assert_eq!(
            decode("000000000O1IL", Form::Base32),
            decode("0000000000111", Form::Base32)
        );
        assert_eq!(
            decode("06Y62-KVCW0-C00", Form::Base32),
            decode("06Y62KVCW0C00", Form::Base32)
        );
    }

    #[test]
    fn bad_text_says_what_and_where() {
        assert_eq!(decode("", Form::Base32), Err(BadText::Empty));
        assert_eq!(
            decode("12U4", Form::Base32),
            Err(BadText::Character { found: 'U', at: 2 })
        );
        // A digit more or less would be another id: the padded forms have one width.
        assert_eq!(
            decode("06Y62KVCW0C0", Form::Base32),
            Err(BadText::Length {
                expected: 13,
                found: 12
            })
        );
        assert_eq!(
            decode("06Y62KVCW0C000", Form::Base32),
            Err(BadText::Length {
                expected: 13,
                found: 14
            })
        );
        assert_eq!(
            decode(&"0".repeat(100_000), Form::Base32),
            Err(BadText::Length {
                expected: 13,
                found: 100_000
            })
        );
        assert_eq!(
            decode("0000000000", Form::Base62),
            Err(BadText::Length {
                expected: 11,
                found: 10
            })
        );
        for bad in ["-06Y62KVCW0C00", "06Y62KVCW0C00-", "06Y62--KVCW0C00"] {
            assert!(
                matches!(decode(bad, Form::Base32), Err(BadText::Hyphen { .. })),
                "{bad}"
            );
        }
        assert_eq!(decode(&"0".repeat(40), Form::Decimal), Ok(0));
        assert_eq!(
            decode("abc!", Form::Base62),
            Err(BadText::Character { found: '!', at: 3 })
        );
        assert_eq!(decode("-5", Form::Decimal), Err(BadText::Negative));
        assert_eq!(
            decode("9223372036854775808", Form::Decimal),
            Err(BadText::TooLarge)
        );
        assert_eq!(
            decode("ZZZZZZZZZZZZZ", Form::Base32),
            Err(BadText::TooLarge)
        );
        assert_eq!(
            BadText::Character { found: 'U', at: 2 }.to_string(),
            "'U' at position 3 is not a digit of the form"
        );
        assert_eq!(Form::parse("Base62"), Some(Form::Base62));
        assert_eq!(Form::parse("hex"), None);
    }
}
