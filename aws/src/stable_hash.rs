//! A hash that is the same in every process, replica and kerf version (FNV-1a, 64 bits), for names kerf
//! derives from content and must find again: launch templates, instance profiles.

pub fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_published_fnv1a_vectors() {
        assert_eq!(super::fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
