//! How deeply YAML text nests, measured in one pass before it is parsed.
//!
//! The YAML parser (libyaml) spends time proportional to the flow depth on
//! every token, so `[[[[…` costs the square of its depth: 200,000 levels took
//! minutes. This scan finds the first place where the nesting passes a limit
//! in time linear in the text, so the parser never sees such text.
//!
//! To agree with the parser it follows libyaml's scanner wherever that decides
//! what is structure and what is text: a quote, `#`, `[` or `{` means something
//! only where a token starts; a plain scalar goes on to the next line while
//! that line is indented past the enclosing block; a block scalar (`|`, `>`)
//! holds every line indented at least as far as its first one. Block nesting
//! is counted like libyaml's indentation stack (`- `, `? ` and `key:` open a
//! level at their column), flow nesting by its brackets (and a single-pair
//! mapping in a flow sequence, `[a: b]`, as one more). Where the parser
//! would stop at a syntax error, what the scan counts after it does not matter.

/// Where nesting first went past the limit: the 1-based line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
}

/// Checks that `text` nests at most `limit` levels (block and flow levels
/// together, counted as the parser will see them), in time linear in its
/// length.
pub fn check_nesting(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut scan = Scan {
        text: text.as_bytes(),
        at: 0,
        line: 1,
        col: 0,
        blocks: Vec::new(),
        flow: Vec::new(),
        pairs: 0,
        key_allowed: true,
        block_key: None,
        limit,
    };
    scan.run()
}

/// A block collection open at a column. An indentless sequence (`key:` then
/// `- item` at the key's own column) is a level libyaml does not indent for,
/// so it is kept apart to close when anything but `- ` comes at that column.
#[derive(Clone, Copy)]
struct Block {
    col: usize,
    sequence: bool,
    indentless: bool,
}

/// A flow collection open: a sequence may hold single-pair mappings.
#[derive(Clone, Copy)]
struct Flow {
    sequence: bool,
    pair: bool,
}

/// Where a token started.
#[derive(Clone, Copy)]
struct Mark {
    at: usize,
    line: usize,
    col: usize,
}

/// Longest simple key libyaml looks back over for its `:`.
const MAX_SIMPLE_KEY: usize = 1024;

struct Scan<'a> {
    text: &'a [u8],
    at: usize,
    line: usize,
    /// In characters, as libyaml counts columns.
    col: usize,
    blocks: Vec<Block>,
    /// The open flow collections, innermost last.
    flow: Vec<Flow>,
    /// How many of them hold a single-pair mapping (`[a: b]`) being read.
    pairs: usize,
    /// Whether a token here may start a simple key (`key: value`).
    key_allowed: bool,
    /// The start of the possible simple key of the block context, the column
    /// at which its mapping opens when its `:` comes.
    block_key: Option<Mark>,
    limit: usize,
}

impl Scan<'_> {
    fn run(&mut self) -> Result<(), TooDeep> {
        if self.text.starts_with("\u{feff}".as_bytes()) {
            self.at = 3;
        }
        loop {
            self.skip_to_token();
            let Some(c) = self.peek(0) else { return Ok(()) };
            if self.flow.is_empty() {
                self.unroll(c == b'-' && self.blankz(1));
            }
            let before = self.at;
            self.token(c)?;
            if self.at == before {
                // Never stand still, whatever the text.
                self.bump();
            }
        }
    }

    /// One token, starting at `c`, as libyaml's `fetch_next_token` sorts them.
    fn token(&mut self, c: u8) -> Result<(), TooDeep> {
        let block = self.flow.is_empty();
        match c {
            b'%' if self.col == 0 => {
                self.blocks.clear();
                self.skip_line();
                self.forget_key(false);
            }
            b'-' | b'.' if self.col == 0 && self.document_marker() => {
                self.blocks.clear();
                self.advance(3);
                self.forget_key(false);
            }
            b'[' | b'{' => {
                self.save_key();
                self.flow.push(Flow { sequence: c == b'[', pair: false });
                self.advance(1);
                self.key_allowed = true;
                self.check_depth()?;
            }
            b']' | b'}' => {
                if self.flow.pop().is_some_and(|f| f.pair) {
                    self.pairs -= 1;
                }
                self.advance(1);
                self.key_allowed = false;
            }
            b',' => {
                if let Some(top) = self.flow.last_mut().filter(|f| f.pair) {
                    top.pair = false;
                    self.pairs -= 1;
                }
                self.advance(1);
                self.key_allowed = true;
            }
            b'-' if self.blankz(1) => {
                if block {
                    self.roll(self.col, true)?;
                }
                self.advance(1);
                self.forget_key(true);
            }
            b'?' if !block || self.blankz(1) => {
                if block {
                    self.roll(self.col, false)?;
                } else {
                    self.open_pair()?;
                }
                self.advance(1);
                self.forget_key(block);
            }
            b':' if !block || self.blankz(1) => {
                if block {
                    self.open_mapping_at_key()?;
                } else {
                    self.open_pair()?;
                }
                self.advance(1);
                self.forget_key(block);
            }
            b'*' | b'&' => {
                self.save_key();
                self.advance(1);
                while self.peek(0).is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
                    self.advance(1);
                }
                self.key_allowed = false;
            }
            b'!' => {
                // A tag ends at a blank, or inside a flow collection at a flow
                // indicator; libyaml rejects one that ends elsewhere.
                self.save_key();
                while !self.blankz(0) && !self.at_flow_indicator(0) {
                    self.bump();
                }
                self.key_allowed = false;
            }
            b'|' | b'>' if block => {
                self.block_scalar();
                self.forget_key(true);
            }
            b'\'' | b'"' => {
                self.save_key();
                self.quoted(c);
                self.key_allowed = false;
            }
            _ => {
                self.save_key();
                self.key_allowed = self.plain();
            }
        }
        Ok(())
    }

    /// Skips blanks, comments and line breaks up to the next token.
    fn skip_to_token(&mut self) {
        loop {
            match self.peek(0) {
                Some(b' ' | b'\t') => self.advance(1),
                Some(b'#') => self.skip_line(),
                Some(_) if self.break_len(self.at) > 0 => {
                    self.bump();
                    if self.flow.is_empty() {
                        self.key_allowed = true;
                    }
                }
                _ => return,
            }
        }
    }

    /// Closes the block collections a token at this column ends.
    fn unroll(&mut self, block_entry: bool) {
        while self.blocks.last().is_some_and(|b| b.col > self.col) {
            self.blocks.pop();
        }
        if !block_entry && self.blocks.last().is_some_and(|b| b.indentless && b.col == self.col) {
            self.blocks.pop();
        }
    }

    /// Opens a block collection at `col` unless one is open there already.
    fn roll(&mut self, col: usize, sequence: bool) -> Result<(), TooDeep> {
        let indentless = match self.blocks.last() {
            // A sequence at its mapping's own column is that mapping's value.
            Some(top) if top.col == col && sequence && !top.sequence => true,
            Some(top) if top.col >= col => return Ok(()),
            _ => false,
        };
        self.blocks.push(Block { col, sequence, indentless });
        self.check_depth()
    }

    /// At a block `:`, opens the mapping at its key's column (or here, for a
    /// `:` without a key on its line).
    fn open_mapping_at_key(&mut self) -> Result<(), TooDeep> {
        let key = self.block_key.take().filter(|k| k.line == self.line && self.at - k.at <= MAX_SIMPLE_KEY);
        match key {
            Some(key) => self.roll(key.col, false),
            None if self.key_allowed => self.roll(self.col, false),
            None => Ok(()),
        }
    }

    /// A `?` or `:` inside a flow sequence starts a single-pair mapping, one
    /// level more until the entry ends.
    fn open_pair(&mut self) -> Result<(), TooDeep> {
        if let Some(top) = self.flow.last_mut().filter(|f| f.sequence && !f.pair) {
            top.pair = true;
            self.pairs += 1;
        }
        self.check_depth()
    }

    fn save_key(&mut self) {
        if self.flow.is_empty() && self.key_allowed {
            self.block_key = Some(Mark { at: self.at, line: self.line, col: self.col });
        }
    }

    /// After an indicator: the block key is used up or impossible (inside a
    /// flow collection the block key is not this token's business).
    fn forget_key(&mut self, key_allowed: bool) {
        if self.flow.is_empty() {
            self.block_key = None;
        }
        self.key_allowed = key_allowed;
    }

    fn check_depth(&self) -> Result<(), TooDeep> {
        if self.blocks.len() + self.flow.len() + self.pairs > self.limit {
            return Err(TooDeep { line: self.line });
        }
        Ok(())
    }

    /// A single- or double-quoted scalar, which may span lines.
    fn quoted(&mut self, quote: u8) {
        self.advance(1);
        while let Some(c) = self.peek(0) {
            if c == quote && quote == b'\'' && self.peek(1) == Some(b'\'') {
                self.advance(2);
            } else if c == quote {
                self.advance(1);
                return;
            } else if c == b'\\' && quote == b'"' {
                self.advance(1);
                self.bump();
            } else {
                self.bump();
            }
        }
    }

    /// A plain scalar, as libyaml's `scan_plain_scalar` ends it; whether it
    /// ended after a line break (a simple key may start there).
    fn plain(&mut self) -> bool {
        let continuation_col = self.top_col() + 1;
        let mut after_break = false;
        loop {
            if self.col == 0 && self.document_marker() || self.peek(0) == Some(b'#') {
                break;
            }
            while !self.blankz(0) {
                // Inside a flow collection, libyaml stops with an error at a `:`
                // before `,?[]{}`; ending the scalar there is as good.
                let colon = self.peek(0) == Some(b':');
                let ends = colon && (self.blankz(1) || self.at_flow_indicator(1) || !self.flow.is_empty() && self.peek(1) == Some(b'?'))
                    || self.at_flow_indicator(0);
                if ends {
                    return after_break;
                }
                self.bump();
                after_break = false;
            }
            if self.peek(0).is_none() {
                break;
            }
            while self.peek(0).is_some_and(|c| c == b' ' || c == b'\t') || self.break_len(self.at) > 0 {
                after_break |= self.break_len(self.at) > 0;
                self.bump();
            }
            if self.flow.is_empty() && (self.col as isize) < continuation_col {
                break;
            }
        }
        after_break
    }

    /// A literal or folded block scalar: its header line, then every line
    /// indented at least as far as the scalar (blank lines included).
    fn block_scalar(&mut self) {
        let parent = self.top_col();
        self.advance(1);
        let mut explicit = None;
        while !self.blankz(0) {
            if let Some(digit @ b'1'..=b'9') = self.peek(0) {
                explicit = Some((digit - b'0') as isize);
            }
            self.bump();
        }
        self.skip_line();
        self.bump();
        let indent = match explicit {
            Some(step) if parent >= 0 => parent + step,
            Some(step) => step,
            None => self.detected_indent().max(parent + 1).max(1),
        };
        loop {
            let spaces = self.leading_spaces(self.at);
            let content_at = self.at + spaces;
            let blank_line = content_at >= self.text.len() || self.break_len(content_at) > 0;
            if ((spaces as isize) < indent && !blank_line) || content_at >= self.text.len() {
                self.advance(spaces.min(indent.max(0) as usize));
                return;
            }
            self.skip_line();
            self.bump();
        }
    }

    /// The indentation libyaml gives a block scalar without an explicit one:
    /// the most leading spaces among its leading blank lines and first line.
    fn detected_indent(&self) -> isize {
        let mut at = self.at;
        let mut most = 0;
        loop {
            let spaces = self.leading_spaces(at);
            most = most.max(spaces);
            let after = at + spaces;
            let breaks = self.break_len(after);
            if after >= self.text.len() || breaks == 0 {
                return most as isize;
            }
            at = after + breaks;
        }
    }

    fn leading_spaces(&self, at: usize) -> usize {
        self.text[at.min(self.text.len())..].iter().take_while(|&&c| c == b' ').count()
    }

    fn top_col(&self) -> isize {
        self.blocks.last().map_or(-1, |b| b.col as isize)
    }

    /// `---` or `...` followed by a blank, a break or the end.
    fn document_marker(&self) -> bool {
        let three = self.text.get(self.at..self.at + 3);
        matches!(three, Some(b"---" | b"...")) && self.blankz(3)
    }

    /// Moves to the line break ending this line (not past it).
    fn skip_line(&mut self) {
        while self.peek(0).is_some() && self.break_len(self.at) == 0 {
            self.bump();
        }
    }

    /// `,`, `[`, `]`, `{` or `}` inside a flow collection, `ahead` bytes on.
    fn at_flow_indicator(&self, ahead: usize) -> bool {
        !self.flow.is_empty() && matches!(self.peek(ahead), Some(b',' | b'[' | b']' | b'{' | b'}'))
    }

    fn peek(&self, ahead: usize) -> Option<u8> {
        self.text.get(self.at + ahead).copied()
    }

    /// A blank, a line break or the end, `ahead` bytes on.
    fn blankz(&self, ahead: usize) -> bool {
        match self.text.get(self.at + ahead) {
            None | Some(b' ' | b'\t') => true,
            Some(_) => self.break_len(self.at + ahead) > 0,
        }
    }

    /// The length of the line break at `at`, 0 if there is none; libyaml's
    /// breaks include NEL, LINE SEPARATOR and PARAGRAPH SEPARATOR.
    fn break_len(&self, at: usize) -> usize {
        match &self.text[at.min(self.text.len())..] {
            [b'\r', b'\n', ..] => 2,
            [b'\r' | b'\n', ..] => 1,
            [0xC2, 0x85, ..] => 2,
            [0xE2, 0x80, 0xA8 | 0xA9, ..] => 3,
            _ => 0,
        }
    }

    /// Moves over `count` single-byte characters on this line.
    fn advance(&mut self, count: usize) {
        self.at = (self.at + count).min(self.text.len());
        self.col += count;
    }

    /// Moves over one character or line break.
    fn bump(&mut self) {
        let Some(&first) = self.text.get(self.at) else { return };
        let breaks = self.break_len(self.at);
        if breaks > 0 {
            self.at += breaks;
            self.line += 1;
            self.col = 0;
            return;
        }
        let width = match first {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        self.at = (self.at + width).min(self.text.len());
        self.col += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn depth(text: &str) -> usize {
        (0..200).find(|&limit| check_nesting(text, limit).is_ok()).expect("depth below 200")
    }

    #[test]
    fn block_levels_are_counted_like_the_parser_s_indentation() {
        assert_eq!(depth("a: 1\n"), 1);
        assert_eq!(depth("a:\n  b:\n    c: 1\n  d: 2\ne: 3\n"), 3);
        assert_eq!(depth("- - - x\n"), 3);
        assert_eq!(depth("a:\n- b: 1\n  c: 2\nd: 3\n"), 3);
        assert_eq!(depth("? ? x\n"), 2);
        assert_eq!(depth("a: [1, {b: [2]}]\n"), 4);
        // The mapping opens at the `:`, after its flow key has closed.
        assert_eq!(depth("[[a]]: b\n"), 2);
    }

    #[test]
    fn a_single_pair_mapping_in_a_flow_sequence_is_a_level() {
        assert_eq!(depth("[a: [b: c]]\n"), 4);
        assert_eq!(depth("[? a, b, {c: d}]\n"), 2);
    }

    #[test]
    fn brackets_that_are_text_are_not_levels() {
        assert_eq!(depth("a: '[[[''['\nb: \"[[\\\"[\"\nc: x[[[ # [[[\n"), 1);
        assert_eq!(depth("a: b\n  [[[ continued\n"), 1);
        assert_eq!(depth("a: |\n  [[[\n   [[[\n\n  [[[\nb: 1\n"), 1);
        assert_eq!(depth("a: !t[[[ x\n"), 1);
        assert_eq!(depth("url: redis://[::1]:6379\n"), 1);
    }

    #[test]
    fn text_after_a_scalar_that_ended_is_structure_again() {
        assert_eq!(depth("a: |\n  x\nb: [[[1]]]\n"), 4);
        assert_eq!(depth("a: b\nc: [[1]]\n"), 3);
        assert_eq!(depth("a: 'x\n  y'\nc: [[1]]\n"), 3);
        assert_eq!(depth("- a\n- [[1]]\n"), 3);
    }

    #[test]
    fn the_first_line_past_the_limit_is_named() {
        assert_eq!(check_nesting("a:\n  b:\n    c: 1\n", 2), Err(TooDeep { line: 3 }));
        assert_eq!(check_nesting(&"[".repeat(10), 9), Err(TooDeep { line: 1 }));
    }

    /// The nesting of a parsed document; a collection used as a key sits at
    /// its mapping's level (the mapping opens at the `:`, after the key).
    fn parsed_depth(value: &serde_yaml_ng::Value) -> usize {
        match value {
            serde_yaml_ng::Value::Sequence(items) => 1 + items.iter().map(parsed_depth).max().unwrap_or(0),
            serde_yaml_ng::Value::Mapping(map) => {
                map.iter().map(|(key, value)| parsed_depth(key).max(1 + parsed_depth(value))).max().unwrap_or(1)
            }
            serde_yaml_ng::Value::Tagged(tagged) => parsed_depth(&tagged.value),
            _ => 0,
        }
    }

    proptest! {
        /// The parser's view is the truth the scan must never fall short of:
        /// text made of YAML's indicators, quotes, breaks and indentation.
        #[test]
        fn the_scan_never_counts_less_nesting_than_the_parser_builds(
            pieces in proptest::collection::vec(prop_oneof![
                Just("a: "), Just("- "), Just("? "), Just(": "), Just("["), Just("]"), Just("{"), Just("}"),
                Just(", "), Just("'x'"), Just("'"), Just("\""), Just("\\"), Just(" #c"), Just("|"), Just(">2"),
                Just("&a "), Just("!t "), Just("b"), Just(" "), Just("\n"), Just("\n  "), Just("\n    "),
            ], 0..40)
        ) {
            let text = pieces.concat();
            if let Ok(value) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&text) {
                prop_assert!(depth(&text) >= parsed_depth(&value), "{:?}", text);
            }
        }
    }
}
