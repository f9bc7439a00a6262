//! The Lua the simulated Redis runs: enough of the language for the lock
//! scripts a Redis lock sends (`local`, `if … then … else … end`, `return`,
//! `redis.call`, `KEYS[n]`, `ARGV[n]`, `==`, `~=`, `not`, `and`, `or`,
//! strings, integers, array tables), with Redis's conversions between Lua
//! values and replies.
//!
//! Goal: run the manager's own scripts, text as shipped, so a defect in
//! them changes what the simulation sees. Method: a tokenizer, a
//! recursive-descent parser to a small tree, and an evaluator that hands
//! each `redis.call` to the host. Invariant: anything outside the subset is
//! a script error (Redis's `-ERR`), never a guess.

use std::collections::BTreeMap;

use super::resp::Reply;

/// A Lua value as the lock scripts see them.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Nil,
    Bool(bool),
    Number(i64),
    Str(Vec<u8>),
    Table(Vec<Value>),
    /// A status reply as Lua sees it: `{ok = "OK"}`.
    Status(String),
}

impl Value {
    fn truthy(&self) -> bool {
        !matches!(self, Value::Nil | Value::Bool(false))
    }

    /// Redis's conversion of a reply into Lua.
    fn from_reply(reply: Reply) -> Result<Value, String> {
        Ok(match reply {
            Reply::Status(text) => Value::Status(text),
            Reply::Error(text) => return Err(text),
            Reply::Integer(value) => Value::Number(value),
            Reply::Bulk(None) => Value::Bool(false),
            Reply::Bulk(Some(bytes)) => Value::Str(bytes),
            Reply::Array(items) => Value::Table(
                items
                    .into_iter()
                    .map(Value::from_reply)
                    .collect::<Result<_, _>>()?,
            ),
        })
    }

    /// Redis's conversion of a Lua value into a reply.
    fn into_reply(self) -> Reply {
        match self {
            Value::Nil | Value::Bool(false) => Reply::Bulk(None),
            Value::Bool(true) => Reply::Integer(1),
            Value::Number(value) => Reply::Integer(value),
            Value::Str(bytes) => Reply::Bulk(Some(bytes)),
            // An array stops at its first nil, as Redis converts it.
            Value::Table(items) => Reply::Array(
                items
                    .into_iter()
                    .take_while(|item| *item != Value::Nil)
                    .map(Value::into_reply)
                    .collect(),
            ),
            Value::Status(text) => Reply::Status(text),
        }
    }

    /// A `redis.call` argument: strings and integers only.
    fn argument(&self) -> Result<Vec<u8>, String> {
        match self {
            Value::Str(bytes) => Ok(bytes.clone()),
            Value::Number(value) => Ok(value.to_string().into_bytes()),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers".to_string()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Name(String),
    Number(i64),
    Str(Vec<u8>),
    Symbol(&'static str),
}

const SYMBOLS: [&str; 12] = ["==", "~=", "(", ")", "{", "}", "[", "]", ",", ".", "=", ";"];

fn tokenize(source: &str) -> Result<Vec<Token>, String> {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if source[i..].starts_with("--") {
            i += source[i..].find('\n').unwrap_or(source.len() - i);
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            tokens.push(Token::Name(source[start..i].to_string()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let number = source[start..i]
                .parse()
                .map_err(|_| format!("a number {:?}", &source[start..i]))?;
            tokens.push(Token::Number(number));
        } else if c == b'\'' || c == b'"' {
            let mut text = Vec::new();
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return Err("an unfinished string".to_string()),
                    Some(&b) if b == c => break,
                    Some(b'\\') => {
                        let escaped = match bytes.get(i + 1) {
                            Some(b'n') => b'\n',
                            Some(&other @ (b'\\' | b'\'' | b'"')) => other,
                            other => return Err(format!("an escape {other:?}")),
                        };
                        text.push(escaped);
                        i += 2;
                    }
                    Some(&b) => {
                        text.push(b);
                        i += 1;
                    }
                }
            }
            i += 1;
            tokens.push(Token::Str(text));
        } else if let Some(symbol) = SYMBOLS.iter().find(|s| source[i..].starts_with(**s)) {
            tokens.push(Token::Symbol(symbol));
            i += symbol.len();
        } else {
            return Err(format!("a character {:?}", c as char));
        }
    }
    Ok(tokens)
}

#[derive(Clone, Debug)]
enum Expr {
    Literal(Value),
    Local(String),
    /// `KEYS[n]` or `ARGV[n]`.
    Argument {
        keys: bool,
        index: Box<Expr>,
    },
    /// `redis.call(…)`.
    Call(Vec<Expr>),
    Table(Vec<Expr>),
    Equal(Box<Expr>, Box<Expr>, bool),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

#[derive(Clone, Debug)]
enum Statement {
    Local(String, Expr),
    If(Vec<(Expr, Vec<Statement>)>, Vec<Statement>),
    Return(Expr),
    Call(Expr),
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Result<Token, String> {
        let token = self
            .tokens
            .get(self.at)
            .cloned()
            .ok_or("an unexpected end")?;
        self.at += 1;
        Ok(token)
    }

    fn is_name(&self, name: &str) -> bool {
        matches!(self.peek(), Some(Token::Name(n)) if n == name)
    }

    fn is_symbol(&self, symbol: &str) -> bool {
        matches!(self.peek(), Some(Token::Symbol(s)) if *s == symbol)
    }

    fn expect_symbol(&mut self, symbol: &str) -> Result<(), String> {
        match self.next()? {
            Token::Symbol(s) if s == symbol => Ok(()),
            other => Err(format!("expected {symbol:?}, found {other:?}")),
        }
    }

    fn expect_name(&mut self, name: &str) -> Result<(), String> {
        match self.next()? {
            Token::Name(n) if n == name => Ok(()),
            other => Err(format!("expected {name:?}, found {other:?}")),
        }
    }

    /// Statements up to one of `ends` (not consumed) or the end of input.
    fn block(&mut self, ends: &[&str]) -> Result<Vec<Statement>, String> {
        let mut statements = Vec::new();
        while self.peek().is_some() && !ends.iter().any(|end| self.is_name(end)) {
            if self.is_symbol(";") {
                self.at += 1;
                continue;
            }
            statements.push(self.statement()?);
        }
        Ok(statements)
    }

    fn statement(&mut self) -> Result<Statement, String> {
        if self.is_name("local") {
            self.at += 1;
            let Token::Name(name) = self.next()? else {
                return Err("a local without a name".to_string());
            };
            self.expect_symbol("=")?;
            return Ok(Statement::Local(name, self.expression()?));
        }
        if self.is_name("if") {
            self.at += 1;
            let mut arms = Vec::new();
            let mut otherwise = Vec::new();
            loop {
                let condition = self.expression()?;
                self.expect_name("then")?;
                let body = self.block(&["elseif", "else", "end"])?;
                arms.push((condition, body));
                match self.next()? {
                    Token::Name(n) if n == "elseif" => continue,
                    Token::Name(n) if n == "else" => {
                        otherwise = self.block(&["end"])?;
                        self.expect_name("end")?;
                        break;
                    }
                    Token::Name(n) if n == "end" => break,
                    other => return Err(format!("an if ended by {other:?}")),
                }
            }
            return Ok(Statement::If(arms, otherwise));
        }
        if self.is_name("return") {
            self.at += 1;
            return Ok(Statement::Return(self.expression()?));
        }
        let expression = self.expression()?;
        match expression {
            Expr::Call(_) => Ok(Statement::Call(expression)),
            other => Err(format!("a statement that is not a call: {other:?}")),
        }
    }

    fn expression(&mut self) -> Result<Expr, String> {
        let mut left = self.conjunction()?;
        while self.is_name("or") {
            self.at += 1;
            left = Expr::Or(Box::new(left), Box::new(self.conjunction()?));
        }
        Ok(left)
    }

    fn conjunction(&mut self) -> Result<Expr, String> {
        let mut left = self.comparison()?;
        while self.is_name("and") {
            self.at += 1;
            left = Expr::And(Box::new(left), Box::new(self.comparison()?));
        }
        Ok(left)
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let left = self.unary()?;
        for (symbol, equal) in [("==", true), ("~=", false)] {
            if self.is_symbol(symbol) {
                self.at += 1;
                return Ok(Expr::Equal(Box::new(left), Box::new(self.unary()?), equal));
            }
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.is_name("not") {
            self.at += 1;
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, String> {
        match self.next()? {
            Token::Number(value) => Ok(Expr::Literal(Value::Number(value))),
            Token::Str(text) => Ok(Expr::Literal(Value::Str(text))),
            Token::Symbol("(") => {
                let inner = self.expression()?;
                self.expect_symbol(")")?;
                Ok(inner)
            }
            Token::Symbol("{") => {
                let mut items = Vec::new();
                while !self.is_symbol("}") {
                    items.push(self.expression()?);
                    if !self.is_symbol("}") {
                        self.expect_symbol(",")?;
                    }
                }
                self.at += 1;
                Ok(Expr::Table(items))
            }
            Token::Name(name) => match name.as_str() {
                "nil" => Ok(Expr::Literal(Value::Nil)),
                "true" => Ok(Expr::Literal(Value::Bool(true))),
                "false" => Ok(Expr::Literal(Value::Bool(false))),
                "KEYS" | "ARGV" => {
                    self.expect_symbol("[")?;
                    let index = self.expression()?;
                    self.expect_symbol("]")?;
                    Ok(Expr::Argument {
                        keys: name == "KEYS",
                        index: Box::new(index),
                    })
                }
                "redis" => {
                    self.expect_symbol(".")?;
                    self.expect_name("call")?;
                    self.expect_symbol("(")?;
                    let mut arguments = Vec::new();
                    while !self.is_symbol(")") {
                        arguments.push(self.expression()?);
                        if !self.is_symbol(")") {
                            self.expect_symbol(",")?;
                        }
                    }
                    self.at += 1;
                    Ok(Expr::Call(arguments))
                }
                _ => Ok(Expr::Local(name)),
            },
            other => Err(format!("an expression starting with {other:?}")),
        }
    }
}

/// A parsed script.
#[derive(Clone, Debug)]
pub struct Script {
    body: Vec<Statement>,
}

impl Script {
    /// Parses `source`; anything outside the subset is an error naming it.
    pub fn parse(source: &str) -> Result<Script, String> {
        let mut parser = Parser {
            tokens: tokenize(source)?,
            at: 0,
        };
        let body = parser.block(&[])?;
        Ok(Script { body })
    }

    /// Runs the script; `call` runs one Redis command for `redis.call`.
    /// With `compare_always_equal`, every `==` is true and every `~=`
    /// false: the script as if written without its comparisons (a planted
    /// defect).
    pub fn run(
        &self,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        compare_always_equal: bool,
        call: &mut dyn FnMut(&[Vec<u8>]) -> Reply,
    ) -> Reply {
        let mut run = Run {
            keys,
            argv,
            compare_always_equal,
            locals: BTreeMap::new(),
            call,
        };
        match run.block(&self.body) {
            Ok(Some(value)) => value.into_reply(),
            Ok(None) => Reply::Bulk(None),
            Err(error) if error.starts_with("ERR") || error.starts_with("WRONGTYPE") => {
                Reply::Error(error)
            }
            Err(error) => Reply::Error(format!("ERR Error running script: {error}")),
        }
    }
}

struct Run<'r> {
    keys: &'r [Vec<u8>],
    argv: &'r [Vec<u8>],
    compare_always_equal: bool,
    locals: BTreeMap<String, Value>,
    call: &'r mut dyn FnMut(&[Vec<u8>]) -> Reply,
}

impl Run<'_> {
    /// `Some` when the block returned.
    fn block(&mut self, statements: &[Statement]) -> Result<Option<Value>, String> {
        for statement in statements {
            match statement {
                Statement::Local(name, expression) => {
                    let value = self.eval(expression)?;
                    self.locals.insert(name.clone(), value);
                }
                Statement::If(arms, otherwise) => {
                    let mut taken = None;
                    for (condition, body) in arms {
                        if self.eval(condition)?.truthy() {
                            taken = Some(body);
                            break;
                        }
                    }
                    if let Some(value) = self.block(taken.unwrap_or(otherwise))? {
                        return Ok(Some(value));
                    }
                }
                Statement::Return(expression) => return Ok(Some(self.eval(expression)?)),
                Statement::Call(expression) => {
                    self.eval(expression)?;
                }
            }
        }
        Ok(None)
    }

    fn eval(&mut self, expression: &Expr) -> Result<Value, String> {
        Ok(match expression {
            Expr::Literal(value) => value.clone(),
            Expr::Local(name) => self.locals.get(name).cloned().unwrap_or(Value::Nil),
            Expr::Argument { keys, index } => {
                let Value::Number(index) = self.eval(index)? else {
                    return Err("an index that is not a number".to_string());
                };
                let list = if *keys { self.keys } else { self.argv };
                usize::try_from(index)
                    .ok()
                    .and_then(|index| index.checked_sub(1))
                    .and_then(|index| list.get(index))
                    .map_or(Value::Nil, |bytes| Value::Str(bytes.clone()))
            }
            Expr::Call(arguments) => {
                let mut command = Vec::with_capacity(arguments.len());
                for argument in arguments {
                    command.push(self.eval(argument)?.argument()?);
                }
                if command.is_empty() {
                    return Err(
                        "ERR Please specify at least one argument for this redis lib call"
                            .to_string(),
                    );
                }
                Value::from_reply((self.call)(&command))?
            }
            Expr::Table(items) => Value::Table(
                items
                    .iter()
                    .map(|item| self.eval(item))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Equal(left, right, equal) => {
                let same = self.eval(left)? == self.eval(right)?;
                Value::Bool(if self.compare_always_equal {
                    *equal
                } else {
                    same == *equal
                })
            }
            Expr::Not(inner) => Value::Bool(!self.eval(inner)?.truthy()),
            Expr::And(left, right) => {
                let left = self.eval(left)?;
                if left.truthy() {
                    self.eval(right)?
                } else {
                    left
                }
            }
            Expr::Or(left, right) => {
                let left = self.eval(left)?;
                if left.truthy() {
                    left
                } else {
                    self.eval(right)?
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-key store for the scripts' calls.
    fn store_call<'s>(
        store: &'s mut BTreeMap<Vec<u8>, Vec<u8>>,
        calls: &'s mut Vec<String>,
    ) -> impl FnMut(&[Vec<u8>]) -> Reply + 's {
        move |command: &[Vec<u8>]| {
            calls.push(String::from_utf8_lossy(&command.join(&b' ')).into_owned());
            match command[0].as_slice() {
                b"GET" => Reply::Bulk(store.get(&command[1]).cloned()),
                b"SET" => {
                    store.insert(command[1].clone(), command[2].clone());
                    Reply::Status("OK".to_string())
                }
                b"DEL" => Reply::Integer(i64::from(store.remove(&command[1]).is_some())),
                b"INCR" => Reply::Integer(41 + 1),
                _ => Reply::Error("ERR unknown command".to_string()),
            }
        }
    }

    // The Redis manager's own scripts: the subset must run what ships.
    use leaseproof_locks::{REDIS_ACQUIRE_SCRIPT as ACQUIRE, REDIS_RELEASE_SCRIPT as RELEASE};

    #[test]
    fn the_acquire_script_takes_a_free_key_and_reports_a_held_one() {
        let script = Script::parse(ACQUIRE).unwrap();
        let (mut store, mut calls) = (BTreeMap::new(), Vec::new());
        let keys = [b"k".to_vec(), b"t".to_vec()];
        let reply = script.run(
            &keys,
            &[b"me".to_vec(), b"100".to_vec()],
            false,
            &mut store_call(&mut store, &mut calls),
        );
        assert_eq!(
            reply,
            Reply::Array(vec![Reply::Integer(42), Reply::Bulk(Some(Vec::new()))])
        );
        assert_eq!(calls, ["GET k", "SET k me NX PX 100", "INCR t"]);
        let mut calls = Vec::new();
        let reply = script.run(
            &keys,
            &[b"you".to_vec(), b"100".to_vec()],
            false,
            &mut store_call(&mut store, &mut calls),
        );
        assert_eq!(
            reply,
            Reply::Array(vec![Reply::Integer(0), Reply::Bulk(Some(b"me".to_vec()))])
        );
        assert_eq!(calls, ["GET k"], "a held key is neither set nor counted");
    }

    #[test]
    fn compare_and_delete_deletes_only_its_own_value_unless_the_compare_is_planted_away() {
        let script = Script::parse(RELEASE).unwrap();
        let mut store = BTreeMap::from([(b"k".to_vec(), b"rival".to_vec())]);
        let mut calls = Vec::new();
        let reply = script.run(
            &[b"k".to_vec()],
            &[b"me".to_vec()],
            false,
            &mut store_call(&mut store, &mut calls),
        );
        assert_eq!(reply, Reply::Integer(0));
        assert!(
            store.contains_key(b"k".as_slice()),
            "a rival's key survives"
        );
        let reply = script.run(
            &[b"k".to_vec()],
            &[b"me".to_vec()],
            true,
            &mut store_call(&mut store, &mut calls),
        );
        assert_eq!(reply, Reply::Integer(1));
        assert!(
            store.is_empty(),
            "without the compare the rival's key is deleted"
        );
    }

    #[test]
    fn conversions_and_operators_follow_redis_lua() {
        let mut none = |_: &[Vec<u8>]| Reply::Bulk(None);
        let run = |source: &str, call: &mut dyn FnMut(&[Vec<u8>]) -> Reply| {
            Script::parse(source)
                .unwrap()
                .run(&[b"a".to_vec()], &[b"x".to_vec()], false, call)
        };
        assert_eq!(
            run("return redis.call('GET', 'k')", &mut none),
            Reply::Bulk(None)
        );
        assert_eq!(
            run("return not redis.call('GET', 'k')", &mut none),
            Reply::Integer(1)
        );
        assert_eq!(run("return KEYS[2]", &mut none), Reply::Bulk(None));
        assert_eq!(
            run("return ARGV[1] ~= 'x' or 7", &mut none),
            Reply::Integer(7)
        );
        assert_eq!(
            run("return 0 and 'zero is true'", &mut none),
            Reply::Bulk(Some(b"zero is true".to_vec()))
        );
        assert_eq!(
            run("return {1, nil, 3}", &mut none),
            Reply::Array(vec![Reply::Integer(1)])
        );
        assert_eq!(
            run(
                "if false then return 1 elseif nil then return 2 else return 3 end",
                &mut none
            ),
            Reply::Integer(3)
        );
        let mut status = |_: &[Vec<u8>]| Reply::Status("OK".to_string());
        assert_eq!(
            run("return redis.call('SET', 'k', 'v')", &mut status),
            Reply::Status("OK".to_string())
        );
        let mut failing = |_: &[Vec<u8>]| Reply::Error("WRONGTYPE x".to_string());
        assert_eq!(
            run("redis.call('INCR', 'k') return 1", &mut failing),
            Reply::Error("WRONGTYPE x".to_string())
        );
    }

    #[test]
    fn anything_outside_the_subset_is_refused() {
        for source in [
            "for i = 1, 2 do end",
            "local t = {} t[1] = 2",
            "return 1 + 2",
            "return #KEYS",
            "return redis.pcall('GET', 'k')",
            "x = 1",
        ] {
            assert!(Script::parse(source).is_err(), "{source}");
        }
        let reply = Script::parse("return redis.call(KEYS)")
            .map(|script| script.run(&[], &[], false, &mut |_| Reply::Integer(1)));
        assert!(matches!(reply, Err(_) | Ok(Reply::Error(_))), "{reply:?}");
    }
}
