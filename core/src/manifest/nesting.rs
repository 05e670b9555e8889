//! A linear scan of YAML text for its flow nesting (`[`, `{`), run before the YAML parser sees the text.
//!
//! libyaml (under serde_yaml_ng) looks at every open flow collection for each token it reads, so text such as
//! `{a: {a: {a: …` costs the square of its length long before any recursion limit is reached: 200,000
//! levels took over a minute. Block nesting does not have that cost, and the value reader bounds its depth
//! with the exact location. This scan follows libyaml's own tokenising (quoted and plain scalars, comments,
//! block scalars and their indentation, anchors, tags, document markers), so that a bracket inside a string
//! or a comment is not counted and every bracket libyaml counts is.

/// Where the flow nesting first went deeper than allowed (1-based, as serde_yaml_ng reports locations).
#[derive(Debug, PartialEq, Eq)]
pub struct TooDeep {
    /// The document, counted like the reader counts them.
    pub document: usize,
    pub line: usize,
    pub column: usize,
}

/// Checks that no flow collection in `text` is nested deeper than `max` levels.
pub fn check_flow_depth(text: &str, max: usize) -> Result<(), TooDeep> {
    Scanner {
        bytes: text.as_bytes(),
        pos: 0,
        line: 0,
        column: 0,
        flow: 0,
        indents: Vec::new(),
        key_column: None,
        document: 1,
        started: false,
        max,
    }
    .run()
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// 0-based line and column (in characters) of `pos`.
    line: usize,
    column: usize,
    /// Open flow collections.
    flow: usize,
    /// libyaml's block indentation stack: the columns of the open block collections.
    indents: Vec<usize>,
    /// Where the token that may become a block mapping key started on this line.
    key_column: Option<usize>,
    document: usize,
    /// Whether anything but whitespace and comments came before, so that a first `---` is not a new document.
    started: bool,
    max: usize,
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

impl Scanner<'_> {
    fn peek(&self, ahead: usize) -> Option<u8> {
        self.bytes.get(self.pos + ahead).copied()
    }

    /// The length of the line break at `pos + ahead`, if there is one: LF, CR, CR LF, and the Unicode breaks
    /// libyaml also honours (NEL, LS, PS).
    fn break_len(&self, ahead: usize) -> Option<usize> {
        match (self.peek(ahead), self.peek(ahead + 1), self.peek(ahead + 2)) {
            (Some(b'\r'), Some(b'\n'), _) => Some(2),
            (Some(b'\n' | b'\r'), _, _) => Some(1),
            (Some(0xC2), Some(0x85), _) => Some(2),
            (Some(0xE2), Some(0x80), Some(0xA8 | 0xA9)) => Some(3),
            _ => None,
        }
    }

    /// Whether `pos + ahead` is a blank, a line break or the end of the text.
    fn blank_or_end(&self, ahead: usize) -> bool {
        self.peek(ahead).is_none_or(is_blank) || self.break_len(ahead).is_some()
    }

    /// Moves past one character, or one line break.
    fn advance(&mut self) {
        if let Some(len) = self.break_len(0) {
            self.pos += len;
            self.line += 1;
            self.column = 0;
            return;
        }
        self.pos += 1;
        // Columns count characters: UTF-8 continuation bytes do not start one.
        while self.peek(0).is_some_and(|b| b & 0xC0 == 0x80) {
            self.pos += 1;
        }
        self.column += 1;
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn indent(&self) -> isize {
        self.indents
            .last()
            .map_or(-1, |&i| isize::try_from(i).unwrap_or(isize::MAX))
    }

    fn roll(&mut self, column: usize) {
        if self.indent() < isize::try_from(column).unwrap_or(isize::MAX) {
            self.indents.push(column);
        }
    }

    fn too_deep(&self) -> TooDeep {
        TooDeep {
            document: self.document,
            line: self.line + 1,
            column: self.column + 1,
        }
    }

    fn run(mut self) -> Result<(), TooDeep> {
        loop {
            self.skip_to_token();
            let Some(b) = self.peek(0) else {
                return Ok(());
            };
            if self.column == 0 && self.document_marker() {
                continue;
            }
            if self.column == 0 && b == b'%' {
                self.skip_line();
                continue;
            }
            self.started = true;
            if self.flow == 0 {
                let column = self.column;
                while self.indents.last().is_some_and(|&i| i > column) {
                    self.indents.pop();
                }
            }
            self.token(b)?;
        }
    }

    fn token(&mut self, b: u8) -> Result<(), TooDeep> {
        match b {
            b'[' | b'{' => {
                if self.flow == 0 {
                    self.key_column.get_or_insert(self.column);
                }
                self.flow += 1;
                if self.flow > self.max {
                    return Err(self.too_deep());
                }
                self.advance();
            }
            b']' | b'}' => {
                self.flow = self.flow.saturating_sub(1);
                self.advance();
            }
            b',' => self.advance(),
            b'-' | b'?' if self.blank_or_end(1) => {
                if self.flow == 0 {
                    self.roll(self.column);
                    self.key_column = None;
                }
                self.advance();
            }
            b':' if self.blank_or_end(1)
                || (self.flow > 0 && self.peek(1).is_some_and(is_flow_indicator)) =>
            {
                if self.flow == 0 {
                    let column = self.key_column.take().unwrap_or(self.column);
                    self.roll(column);
                }
                self.advance();
            }
            b'*' | b'&' | b'!' => {
                if self.flow == 0 {
                    self.key_column.get_or_insert(self.column);
                }
                let ends = |s: &Self| {
                    s.blank_or_end(0) || (s.flow > 0 && s.peek(0).is_some_and(is_flow_indicator))
                };
                while !ends(self) {
                    self.advance();
                }
            }
            b'|' | b'>' if self.flow == 0 => self.block_scalar(),
            b'\'' | b'"' => {
                if self.flow == 0 {
                    self.key_column.get_or_insert(self.column);
                }
                self.quoted(b);
            }
            _ => {
                if self.flow == 0 {
                    self.key_column.get_or_insert(self.column);
                }
                self.plain();
            }
        }
        Ok(())
    }

    /// Skips blanks, comments and line breaks up to the next token.
    fn skip_to_token(&mut self) {
        loop {
            match self.peek(0) {
                Some(b) if is_blank(b) => self.advance(),
                Some(b'#') => self.skip_line(),
                Some(_) if self.break_len(0).is_some() => {
                    self.advance();
                    if self.flow == 0 {
                        self.key_column = None;
                    }
                }
                _ => return,
            }
        }
    }

    /// Moves to the line break ending this line (not past it).
    fn skip_line(&mut self) {
        while !self.at_end() && self.break_len(0).is_none() {
            self.advance();
        }
    }

    /// `---` or `...` at the start of a line: a new document, every collection closed.
    fn document_marker(&mut self) -> bool {
        let marker =
            |c| self.peek(0) == Some(c) && self.peek(1) == Some(c) && self.peek(2) == Some(c);
        if !(marker(b'-') || marker(b'.')) || !self.blank_or_end(3) {
            return false;
        }
        if self.peek(0) == Some(b'-') && self.started {
            self.document += 1;
        }
        self.started = true;
        self.flow = 0;
        self.indents.clear();
        self.key_column = None;
        for _ in 0..3 {
            self.advance();
        }
        true
    }

    /// A single- or double-quoted scalar, which may span lines.
    fn quoted(&mut self, quote: u8) {
        self.advance();
        while let Some(b) = self.peek(0) {
            if b == quote {
                self.advance();
                // `''` is an escaped quote inside a single-quoted scalar.
                if quote == b'\'' && self.peek(0) == Some(b'\'') {
                    self.advance();
                    continue;
                }
                return;
            }
            if quote == b'"' && b == b'\\' {
                self.advance();
            }
            self.advance();
        }
    }

    /// A plain scalar: in block context it ends before `: `, ` #` or a line that is not indented past the
    /// enclosing block collection; in flow context also before any flow indicator, and it spans lines.
    fn plain(&mut self) {
        let indent = self.indent();
        loop {
            while let Some(b) = self.peek(0) {
                if self.break_len(0).is_some() {
                    break;
                }
                let ends_with_colon = b == b':'
                    && (self.blank_or_end(1)
                        || (self.flow > 0 && self.peek(1).is_some_and(is_flow_indicator)));
                if ends_with_colon || (self.flow > 0 && is_flow_indicator(b)) {
                    return;
                }
                if is_blank(b) && self.peek(1) == Some(b'#') {
                    return;
                }
                self.advance();
            }
            if !self.continues_plain(indent) {
                return;
            }
        }
    }

    /// At a line break inside a plain scalar: moves to the next line's first character when the scalar goes
    /// on there, or stays at the break.
    fn continues_plain(&mut self, indent: isize) -> bool {
        let (pos, line, column) = (self.pos, self.line, self.column);
        while self.break_len(0).is_some() || self.peek(0).is_some_and(is_blank) {
            self.advance();
        }
        let goes_on = match self.peek(0) {
            None | Some(b'#') => false,
            Some(_) if self.column == 0 && self.is_document_marker() => false,
            Some(_) => self.flow > 0 || isize::try_from(self.column).unwrap_or(isize::MAX) > indent,
        };
        if !goes_on {
            (self.pos, self.line, self.column) = (pos, line, column);
        }
        goes_on
    }

    fn is_document_marker(&self) -> bool {
        let marker =
            |c| self.peek(0) == Some(c) && self.peek(1) == Some(c) && self.peek(2) == Some(c);
        (marker(b'-') || marker(b'.')) && self.blank_or_end(3)
    }

    /// A literal (`|`) or folded (`>`) block scalar: its header line, then every line indented at least as
    /// far as its content (libyaml: the first non-empty line's indentation, at least one past the enclosing
    /// block collection and at least 1; or the header's explicit indentation).
    fn block_scalar(&mut self) {
        let parent = self.indent();
        self.advance();
        let mut explicit = None;
        while let Some(b) = self.peek(0) {
            if self.break_len(0).is_some() {
                break;
            }
            match b {
                b'1'..=b'9' if explicit.is_none() => explicit = Some(usize::from(b - b'0')),
                b'#' => {
                    self.skip_line();
                    break;
                }
                _ => {}
            }
            self.advance();
        }
        let base = usize::try_from(parent).unwrap_or(0);
        let mut content = explicit.map(|d| if parent >= 0 { base + d } else { d });
        let floor = usize::try_from(parent + 1).unwrap_or(0).max(1);
        loop {
            // At the break ending the previous line.
            let (pos, line, column) = (self.pos, self.line, self.column);
            if self.at_end() {
                return;
            }
            self.advance();
            let mut spaces = 0;
            while self.peek(0) == Some(b' ') {
                self.advance();
                spaces += 1;
            }
            let empty = self.at_end() || self.break_len(0).is_some();
            if empty {
                continue;
            }
            let needed = *content.get_or_insert(spaces.max(floor));
            if spaces < needed {
                (self.pos, self.line, self.column) = (pos, line, column);
                return;
            }
            self.skip_line();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, max: usize) -> bool {
        check_flow_depth(text, max).is_ok()
    }

    #[test]
    fn counts_flow_collections_and_names_the_place() {
        assert!(depth_ok("a: [[[1]]]\n", 3));
        assert_eq!(
            check_flow_depth("a: 1\n---\nb:\n  c: [[[[1]]]]\n", 3),
            Err(TooDeep {
                document: 2,
                line: 4,
                column: 9
            })
        );
        assert!(!depth_ok(&"{a: ".repeat(100), 64));
        assert!(!depth_ok(&"[".repeat(100), 64));
        // Closed collections do not add up.
        assert!(depth_ok(&"- [[1], {a: [2]}]\n".repeat(1000), 3));
    }

    #[test]
    fn brackets_in_strings_comments_and_block_scalars_do_not_count() {
        let text = "\
# [[[[[[
a: \"[[[[[[\"
b: '[[[['
c: echo [[[[ {{{{
d: |
  {{{{{{
   [[[[[[
e: >-
    [[[[[
f: [x, \"]]]]\", '}}}', y]
";
        assert!(depth_ok(text, 1), "{:?}", check_flow_depth(text, 1));
        // A block scalar ends at a line indented no further than its mapping: brackets there count.
        assert!(!depth_ok("a: |\n  x\nb: [[[[\n", 3));
        // A string's closing brackets do not close anything.
        assert!(!depth_ok("[[[ \"]]]\", [[[", 5));
        assert!(!depth_ok("[[[ &a \"]]]\" [[[", 5));
        // A plain scalar continued on the next line hides a quote from the scanner, as it does from libyaml.
        assert!(!depth_ok("a: b\n \"\nc: [[[[\n\"\n", 3));
    }

    #[test]
    fn is_linear_on_hostile_text() {
        let started = std::time::Instant::now();
        for text in [
            "{a: ".repeat(200_000),
            "[".repeat(200_000),
            "- ".repeat(200_000),
            "\"".repeat(200_000),
            "a:\n ".repeat(100_000),
            "|\n".repeat(100_000),
        ] {
            let _ = check_flow_depth(&text, 64);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
