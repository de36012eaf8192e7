//! Parses arbitrary addresses: never a panic, and an accepted address is already normal (parsing
//! it again gives the same address).
#![no_main]

use herald_content::email::EmailAddress;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(address) = EmailAddress::parse(input) {
        let again = EmailAddress::parse(address.as_str()).unwrap_or_else(|e| {
            panic!(
                "{:?} was accepted as {:?}, which is refused: {e}",
                input,
                address.as_str()
            )
        });
        assert_eq!(again, address);
    }
});
