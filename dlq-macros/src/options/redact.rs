//! `redact = ["/card/number", ...]`: the JSON pointers of the payload fields operators see
//! masked. At run time the option is `dlq_core::redact`.

use proc_macro2::TokenStream;
use quote::quote;

use super::Room;

/// The `redact` key.
pub(crate) struct Redact;

impl Room for Redact {
    fn key(&self) -> &'static str {
        "redact"
    }

    fn example(&self) -> &'static str {
        "[\"/card/number\", \"/customer/email\"]"
    }

    fn takes(&self) -> &'static str {
        "an array of JSON pointers"
    }

    fn read(&self, tokens: &TokenStream) -> syn::Result<TokenStream> {
        let pointers = crate::attr::pointers(self.key(), tokens)?;
        Ok(quote!(&[#(#pointers),*]))
    }

    fn apply(&self, krate: &TokenStream, value: &TokenStream, registration: TokenStream) -> TokenStream {
        quote!(#krate::redact::registered(#registration, #value))
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use crate::attr::{parse, parse_messages};

    #[test]
    fn redact_takes_json_pointers() {
        let args = parse(quote!(event_type = "x", redact = ["/card/number", "/a~1b/~0c", "/items/0"])).unwrap();
        let values: Vec<String> = args.rooms.iter().map(|(room, value)| format!("{} {value}", room.key())).collect();
        assert_eq!(values, [r#"redact & ["/card/number" , "/a~1b/~0c" , "/items/0"]"#]);
        assert!(parse(quote!(event_type = "x")).unwrap().rooms.is_empty());
        let got = parse_messages(quote!(event_type = "x", redact = ["card", "/a~2", "/ok~"]));
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got[0].contains("`redact` entry \"card\" is not a JSON pointer to a field: start it with `/`"),
            "{got:?}"
        );
        assert!(
            got[1].contains("`redact` entry \"/a~2\"") && got[1].contains("`~` must be followed by `0`"),
            "{got:?}"
        );
        assert!(got[2].contains("\"/ok~\""), "{got:?}");
        assert!(
            parse_messages(quote!(event_type = "x", redact = "/card"))[0]
                .contains("`redact` takes an array of JSON pointers")
        );
        assert!(
            parse_messages(quote!(event_type = "x", redact = [], redact = []))[0].contains("duplicate key `redact`")
        );
    }
}
