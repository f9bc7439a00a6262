//! The published crates' public items, pinned.
//!
//! Goal: a new public item or a changed signature in a crate users depend
//! on is a decision, never an accident. Method: parse each published
//! crate's modules from its `lib.rs` (syn), following `mod` declarations and
//! leaving tests out; list every `pub` item of a module reachable as `pub
//! mod` — its signature, a struct's public fields, an enum's variants, a
//! trait's methods — every `pub use`, the `pub` methods of every inherent
//! impl, and the items of private modules that a `pub use` names; an item
//! behind a `cfg` carries it. The listing must equal `public_api.txt`
//! beside this file; `LEASEPROOF_BLESS=1` rewrites it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quote::ToTokens;
use syn::{Attribute, ImplItem, Item, TraitItem, Visibility};

use super::repository;

/// The crates published to crates.io.
const PUBLISHED: [&str; 4] = [
    "product/leaseproof-protocol",
    "product/leaseproof-postgres",
    "product/leaseproof-locks",
    "harness/leaseproof-history",
];

/// One module's file and where it sits.
struct Module {
    file: PathBuf,
    /// Its path from the crate (`leaseproof_postgres::sql`).
    path: String,
    /// Reachable as `pub mod` all the way from the crate root.
    public: bool,
    /// The `cfg` it is built under, if any.
    cfg: String,
}

/// Every public line of the crate at `crates/<dir>`.
fn listing(dir: &str) -> Vec<String> {
    let root = repository().join("crates").join(dir);
    let name = dir.rsplit('/').next().unwrap().replace('-', "_");
    let mut modules = vec![Module {
        file: root.join("src/lib.rs"),
        path: name,
        public: true,
        cfg: String::new(),
    }];
    let mut parsed = Vec::new();
    while let Some(module) = modules.pop() {
        let text = std::fs::read_to_string(&module.file).unwrap();
        let file = syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("{}: {error}", module.file.display()));
        modules.extend(children(&module, &file.items));
        parsed.push((module, file.items));
    }
    let reexported: BTreeSet<String> = parsed
        .iter()
        .filter(|(module, _)| module.public)
        .flat_map(|(_, items)| items.iter().filter_map(reexported_names))
        .flatten()
        .collect();
    let mut lines = BTreeSet::new();
    for (module, items) in &parsed {
        for item in items {
            lines.extend(item_lines(module, item, &reexported));
        }
    }
    lines.into_iter().collect()
}

/// The modules `items` declare in files of their own.
fn children(parent: &Module, items: &[Item]) -> Vec<Module> {
    let dir = match parent.file.file_name().and_then(|name| name.to_str()) {
        Some("lib.rs" | "mod.rs") => parent.file.parent().unwrap().to_path_buf(),
        _ => parent.file.with_extension(""),
    };
    items
        .iter()
        .filter_map(|item| match item {
            Item::Mod(module) if module.content.is_none() && !is_test(&module.attrs) => {
                let name = module.ident.to_string();
                let flat = dir.join(format!("{name}.rs"));
                let file = if flat.exists() {
                    flat
                } else {
                    dir.join(&name).join("mod.rs")
                };
                Some(Module {
                    file,
                    path: format!("{}::{name}", parent.path),
                    public: parent.public && is_pub(&module.vis),
                    cfg: format!("{}{}", parent.cfg, cfg_of(&module.attrs)),
                })
            }
            _ => None,
        })
        .collect()
}

fn is_pub(visibility: &Visibility) -> bool {
    matches!(visibility, Visibility::Public(_))
}

fn is_test(attrs: &[Attribute]) -> bool {
    cfg_of(attrs).contains("test")
}

/// ` #[cfg(...)]` of `attrs`, or nothing.
fn cfg_of(attrs: &[Attribute]) -> String {
    attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .map(|attr| format!(" {}", tokens(attr)))
        .collect()
}

fn tokens(node: &impl ToTokens) -> String {
    node.to_token_stream().to_string()
}

/// The names a `pub use` makes public.
fn reexported_names(item: &Item) -> Option<Vec<String>> {
    let Item::Use(used) = item else { return None };
    if !is_pub(&used.vis) {
        return None;
    }
    let text = tokens(&used.tree);
    let names = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect();
    Some(names)
}

/// The lines `item` of `module` adds to the listing.
fn item_lines(module: &Module, item: &Item, reexported: &BTreeSet<String>) -> Vec<String> {
    let line = |what: String, attrs: &[Attribute]| {
        format!("{}{}{}: {what}", module.path, module.cfg, cfg_of(attrs))
    };
    if let Item::Impl(block) = item {
        if block.trait_.is_some() || is_test(&block.attrs) {
            return Vec::new();
        }
        let owner = tokens(&block.self_ty);
        return (block.items.iter())
            .filter_map(|inner| match inner {
                ImplItem::Fn(function) if is_pub(&function.vis) => Some(line(
                    format!("impl {owner} {{ {} }}", tokens(&function.sig)),
                    &function.attrs,
                )),
                ImplItem::Const(constant) if is_pub(&constant.vis) => Some(line(
                    format!(
                        "impl {owner} {{ const {}: {} }}",
                        constant.ident,
                        tokens(&constant.ty)
                    ),
                    &constant.attrs,
                )),
                _ => None,
            })
            .collect();
    }
    let Some((name, visibility)) = named(item) else {
        return Vec::new();
    };
    if !is_pub(visibility) || !(module.public || reexported.contains(&name)) {
        return Vec::new();
    }
    let (what, attrs) = signature(item);
    vec![line(what, attrs)]
}

/// An item's name and visibility (`use` items are named by their tree).
fn named(item: &Item) -> Option<(String, &Visibility)> {
    Some(match item {
        Item::Fn(function) => (function.sig.ident.to_string(), &function.vis),
        Item::Struct(structure) => (structure.ident.to_string(), &structure.vis),
        Item::Enum(enumeration) => (enumeration.ident.to_string(), &enumeration.vis),
        Item::Trait(traits) => (traits.ident.to_string(), &traits.vis),
        Item::Const(constant) => (constant.ident.to_string(), &constant.vis),
        Item::Static(statics) => (statics.ident.to_string(), &statics.vis),
        Item::Type(alias) => (alias.ident.to_string(), &alias.vis),
        Item::Use(used) => (tokens(&used.tree), &used.vis),
        Item::Mod(module) => (module.ident.to_string(), &module.vis),
        _ => return None,
    })
}

/// What the listing says of an item.
fn signature(item: &Item) -> (String, &[Attribute]) {
    match item {
        Item::Fn(function) => (tokens(&function.sig), &function.attrs),
        Item::Struct(structure) => {
            let public = (structure.fields.iter()).filter(|field| is_pub(&field.vis));
            let head = format!("struct {}{}", structure.ident, tokens(&structure.generics));
            (
                format!("{head} {{ {} }}", field_list(public)),
                &structure.attrs,
            )
        }
        Item::Enum(enumeration) => {
            let variants: Vec<String> = (enumeration.variants.iter())
                .map(|variant| format!("{}{}", variant.ident, fields(&variant.fields)))
                .collect();
            let head = format!(
                "enum {}{}",
                enumeration.ident,
                tokens(&enumeration.generics)
            );
            (
                format!("{head} {{ {} }}", variants.join(", ")),
                &enumeration.attrs,
            )
        }
        Item::Trait(traits) => {
            let methods: Vec<String> = (traits.items.iter())
                .filter_map(|inner| match inner {
                    TraitItem::Fn(function) => Some(tokens(&function.sig)),
                    TraitItem::Type(alias) => Some(format!("type {}", alias.ident)),
                    TraitItem::Const(constant) => Some(format!("const {}", constant.ident)),
                    _ => None,
                })
                .collect();
            let head = format!("trait {}{}", traits.ident, tokens(&traits.generics));
            (
                format!("{head} {{ {} }}", methods.join("; ")),
                &traits.attrs,
            )
        }
        Item::Const(constant) => (
            format!("const {}: {}", constant.ident, tokens(&constant.ty)),
            &constant.attrs,
        ),
        Item::Static(statics) => (
            format!("static {}: {}", statics.ident, tokens(&statics.ty)),
            &statics.attrs,
        ),
        Item::Type(alias) => (
            format!("type {} = {}", alias.ident, tokens(&alias.ty)),
            &alias.attrs,
        ),
        Item::Use(used) => (format!("use {}", tokens(&used.tree)), &used.attrs),
        Item::Mod(module) => (format!("mod {}", module.ident), &module.attrs),
        _ => (String::new(), &[]),
    }
}

/// A variant's fields, their docs left out: ` { name: type, … }`, ` (type,
/// …)`, or nothing.
fn fields(fields: &syn::Fields) -> String {
    match fields {
        syn::Fields::Named(_) => format!(" {{ {} }}", field_list(fields.iter())),
        syn::Fields::Unnamed(_) => format!(" ({})", field_list(fields.iter())),
        syn::Fields::Unit => String::new(),
    }
}

fn field_list<'f>(fields: impl Iterator<Item = &'f syn::Field>) -> String {
    fields
        .map(|field| {
            let name = field.ident.as_ref().map(|name| format!("{name}: "));
            format!("{}{}", name.unwrap_or_default(), tokens(&field.ty))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn snapshot() -> PathBuf {
    repository().join("crates/leaseproof/tests/it/public_api.txt")
}

#[test]
fn the_published_crates_public_items_are_the_ones_pinned() {
    let listing: Vec<String> = PUBLISHED.iter().flat_map(|dir| listing(dir)).collect();
    let text = listing.join("\n") + "\n";
    if std::env::var_os("LEASEPROOF_BLESS").is_some() {
        std::fs::write(snapshot(), &text).unwrap();
        return;
    }
    let pinned = std::fs::read_to_string(snapshot()).unwrap_or_default();
    if pinned == text {
        return;
    }
    let pinned_lines: BTreeSet<&str> = pinned.lines().collect();
    let lines: BTreeSet<&str> = text.lines().collect();
    let added: Vec<&&str> = lines.difference(&pinned_lines).collect();
    let removed: Vec<&&str> = pinned_lines.difference(&lines).collect();
    panic!(
        "the published crates' public items changed — if that is meant, \
         rerun with LEASEPROOF_BLESS=1 and commit {}:\nadded:\n{}\nremoved:\n{}",
        Path::new("crates/leaseproof/tests/it/public_api.txt").display(),
        added
            .iter()
            .map(|line| format!("  + {line}"))
            .collect::<Vec<_>>()
            .join("\n"),
        removed
            .iter()
            .map(|line| format!("  - {line}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn a_new_public_item_is_caught() {
    let module = Module {
        file: PathBuf::from("lib.rs"),
        path: "demo".to_string(),
        public: true,
        cfg: String::new(),
    };
    let file: syn::File = syn::parse_str(
        "pub fn shown(a: u8) -> u8 { a } fn hidden() {} pub(crate) fn internal() {}
         pub struct S { pub a: u8, b: u8 } impl S { pub fn get(&self) -> u8 { self.a } fn no(&self) {} }
         #[cfg(feature = \"harness\")] pub mod harness_only;",
    )
    .unwrap();
    let lines: Vec<String> = (file.items.iter())
        .flat_map(|item| item_lines(&module, item, &BTreeSet::new()))
        .collect();
    assert_eq!(
        lines,
        [
            "demo: fn shown (a : u8) -> u8",
            "demo: struct S { a: u8 }",
            "demo: impl S { fn get (& self) -> u8 }",
            "demo # [cfg (feature = \"harness\")]: mod harness_only",
        ],
    );
}
