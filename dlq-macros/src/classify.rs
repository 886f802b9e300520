//! `#[derive(Classify)]`: each variant's class from its `#[dlq(...)]` marker.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Data, DeriveInput, Fields, Ident, LitStr, Path, Token};

use crate::errors::Errors;

const DERIVE: &str = "`#[derive(Classify)]`";

/// The class a marker names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Transient,
    Permanent,
    Fatal,
}

impl Class {
    fn from_marker(path: &Path) -> Option<Self> {
        let ident = path.get_ident()?;
        match ident.to_string().as_str() {
            "transient" => Some(Self::Transient),
            "permanent" => Some(Self::Permanent),
            "fatal" => Some(Self::Fatal),
            _ => None,
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Fatal => "fatal",
        }
    }

    fn tokens(self, private: &TokenStream) -> TokenStream {
        match self {
            Self::Transient => quote!(#private::ErrorClass::Transient),
            Self::Permanent => quote!(#private::ErrorClass::Permanent),
            Self::Fatal => quote!(#private::ErrorClass::Fatal),
        }
    }
}

/// What the `#[dlq(...)]` attributes of one item (the type or a variant) say.
#[derive(Default)]
struct Markers {
    class: Option<(Path, Class)>,
    krate: Option<Path>,
}

/// Expands `#[derive(Classify)]`.
///
/// With bad markers the impl is still emitted (unmarked variants are transient) beside the
/// errors, so that code using the type does not fail a second time.
pub(crate) fn derive(input: TokenStream) -> TokenStream {
    let input = match syn::parse2::<DeriveInput>(input) {
        Ok(input) => input,
        Err(err) => return err.into_compile_error(),
    };
    let mut errors = Errors::default();
    let container = markers(&input.attrs, true, &mut errors);
    let default = container.class.map_or(Class::Transient, |(_, class)| class);
    let krate = container.krate.as_ref().map_or_else(|| quote!(::dlq_core), ToTokens::to_token_stream);
    let private = quote!(#krate::__private);
    let ident = &input.ident;
    let name = unraw(ident);
    let (classify, kind) = match &input.data {
        Data::Struct(data) => {
            check_fields(&data.fields, &mut errors);
            (default.tokens(&private), quote!(#name))
        }
        Data::Enum(data) => {
            let variants = data.variants.iter().map(|variant| {
                check_fields(&variant.fields, &mut errors);
                let markers = markers(&variant.attrs, false, &mut errors);
                let class = markers.class.map_or(default, |(_, class)| class);
                (&variant.ident, class)
            });
            enum_bodies(&name, &variants.collect::<Vec<_>>(), &private)
        }
        Data::Union(data) => {
            let message = format!("{DERIVE} applies to enums and structs, not to unions");
            errors.push(syn::Error::new_spanned(data.union_token, message));
            (Class::Transient.tokens(&private), quote!(#name))
        }
    };
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let errors = errors.finish().err().map(syn::Error::into_compile_error);
    quote! {
        #[automatically_derived]
        impl #impl_generics #private::Classify for #ident #ty_generics #where_clause {
            fn classify(&self) -> #private::ErrorClass {
                #classify
            }
            fn kind(&self) -> &'static str {
                #kind
            }
        }
        #errors
    }
}

/// The bodies of `classify` and `kind` for an enum: one `match` arm per class (so no two arms
/// are the same) and one per variant.
fn enum_bodies(name: &str, variants: &[(&Ident, Class)], private: &TokenStream) -> (TokenStream, TokenStream) {
    if variants.is_empty() {
        return (quote!(match *self {}), quote!(match *self {}));
    }
    let mut classes: Vec<Class> = variants.iter().map(|(_, class)| *class).collect();
    classes.dedup();
    let classify = if let [class] = classes[..] {
        class.tokens(private)
    } else {
        let arms = [Class::Transient, Class::Permanent, Class::Fatal].into_iter().filter_map(|class| {
            let pats: Vec<_> =
                variants.iter().filter(|(_, c)| *c == class).map(|(v, _)| quote!(Self::#v { .. })).collect();
            let tokens = class.tokens(private);
            (!pats.is_empty()).then(|| quote!(#(#pats)|* => #tokens,))
        });
        quote!(match self { #(#arms)* })
    };
    let kinds = variants.iter().map(|(variant, _)| {
        let kind = format!("{name}::{}", unraw(variant));
        quote!(Self::#variant { .. } => #kind,)
    });
    (classify, quote!(match self { #(#kinds)* }))
}

/// Reads the `#[dlq(...)]` attributes of the type (`container`) or of a variant.
fn markers(attrs: &[Attribute], container: bool, errors: &mut Errors) -> Markers {
    let mut markers = Markers::default();
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("dlq")) {
        if attr.meta.require_list().is_err() {
            let message = format!("{DERIVE}: write `#[dlq(transient)]`, `#[dlq(permanent)]` or `#[dlq(fatal)]`");
            errors.push(syn::Error::new_spanned(attr, message));
            continue;
        }
        if let Err(err) = attr.parse_nested_meta(|meta| marker(&meta, container, &mut markers)) {
            errors.push(err);
        }
    }
    markers
}

/// Reads one marker into `markers`.
fn marker(meta: &ParseNestedMeta, container: bool, markers: &mut Markers) -> syn::Result<()> {
    let path = &meta.path;
    if container && path.is_ident("crate") {
        let lit: LitStr = meta.value()?.parse()?;
        if markers.krate.is_some() {
            return Err(syn::Error::new_spanned(path, format!("{DERIVE}: duplicate marker `crate`")));
        }
        markers.krate = Some(lit.parse().map_err(|_| {
            syn::Error::new_spanned(&lit, format!("{DERIVE}: `crate` must be a path, like `crate = \"::dlq_core\"`"))
        })?);
        return Ok(());
    }
    let Some(class) = Class::from_marker(path) else {
        let valid = if container { "transient, permanent, fatal, crate" } else { "transient, permanent, fatal" };
        let found = path.to_token_stream().to_string().replace(' ', "");
        let mut message = format!("{DERIVE}: unknown marker `{found}`; valid markers: {valid}");
        if !container && path.is_ident("crate") {
            message = format!("{DERIVE}: `crate` goes on the type, not on a variant");
        }
        return Err(syn::Error::new_spanned(path, message));
    };
    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        return Err(syn::Error::new_spanned(path, format!("{DERIVE}: `{}` takes no value", class.name())));
    }
    if let Some((first, first_class)) = &markers.class {
        let message = if *first_class == class {
            format!("{DERIVE}: duplicate marker `{}`", class.name())
        } else {
            let first = first.to_token_stream();
            format!("{DERIVE}: `{}` conflicts with `{first}`; give one class", class.name())
        };
        return Err(syn::Error::new_spanned(path, message));
    }
    markers.class = Some((path.clone(), class));
    Ok(())
}

/// `#[dlq(...)]` on a field is a mistake: markers go on variants and on the type.
fn check_fields(fields: &Fields, errors: &mut Errors) {
    for attr in fields.iter().flat_map(|field| &field.attrs) {
        if attr.path().is_ident("dlq") {
            let message = format!("{DERIVE}: `#[dlq(...)]` goes on a variant or on the type, not on a field");
            errors.push(syn::Error::new_spanned(attr, message));
        }
    }
}

fn unraw(ident: &Ident) -> String {
    let name = ident.to_string();
    name.strip_prefix("r#").map_or_else(|| name.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(input: TokenStream) -> String {
        derive(input).to_string()
    }

    #[test]
    fn groups_arms_by_class() {
        let out = expand(quote! {
            enum E { A, #[dlq(permanent)] B(u8), #[dlq(fatal)] C { x: u8 }, D }
        });
        assert!(
            out.contains("Self :: A { .. } | Self :: D { .. } => :: dlq_core :: __private :: ErrorClass :: Transient"),
            "{out}"
        );
        assert!(out.contains("Self :: C { .. } => \"E::C\""), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn container_default_and_crate() {
        let out = expand(quote! {
            #[dlq(permanent, crate = "::dlq")]
            struct S;
        });
        assert!(out.contains(":: dlq :: __private :: ErrorClass :: Permanent"), "{out}");
        assert!(out.contains("\"S\""), "{out}");
    }

    #[test]
    fn reports_misuse() {
        let out = expand(quote! {
            enum E { #[dlq(retryable)] A, #[dlq(transient, permanent)] B, #[dlq(crate = "x")] C }
        });
        assert!(out.contains("unknown marker `retryable`; valid markers: transient, permanent, fatal"), "{out}");
        assert!(out.contains("`permanent` conflicts with `transient`"), "{out}");
        assert!(out.contains("`crate` goes on the type"), "{out}");
    }
}
