//! [`Text`]: a short text in shared memory (a reason, a hint, a node's name), for the control
//! block's messages. Data only.

/// Room for one message in shared memory: a reason that names a table, its owner and what is
/// wrong with it, or an error of the mark writer's transaction. Longer texts are cut at a
/// character boundary.
const TEXT_BYTES: usize = 700;

/// A short text in shared memory.
#[derive(Clone, Copy)]
pub struct Text {
    len: u16,
    bytes: [u8; TEXT_BYTES],
}

impl Default for Text {
    fn default() -> Text {
        Text {
            len: 0,
            bytes: [0; TEXT_BYTES],
        }
    }
}

impl Text {
    pub fn set(&mut self, text: &str) {
        let mut end = text.len().min(self.bytes.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes[..end].copy_from_slice(&text.as_bytes()[..end]);
        self.len = end as u16;
    }

    pub fn get(&self) -> String {
        String::from_utf8_lossy(&self.bytes[..self.len as usize]).into_owned()
    }
}
