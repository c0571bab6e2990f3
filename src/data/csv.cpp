// Numeric CSV: a header row (optional), then rows of numbers. Quoted fields may hold the delimiter.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "tandem/data/loaders.h"
#include "tandem/io.h"

namespace tandem::data {
namespace {

struct Field {
  std::string text;
  size_t offset;  // byte offset of the field in the file
};

// Splits one line into fields; returns the offset just past the line.
size_t split_line(std::string_view text, size_t at, char delimiter, std::vector<Field>& fields,
                  const std::string& name) {
  fields.clear();
  Field f{"", at};
  bool quoted = false;
  size_t i = at;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') f.text += text[++i];
      else if (c == '"') quoted = false;
      else f.text += c;
    } else if (c == '"' && f.text.empty()) {
      quoted = true;
    } else if (c == delimiter) {
      fields.push_back(std::move(f));
      f = Field{"", i + 1};
    } else if (c == '\n') {
      break;
    } else if (c != '\r') {
      f.text += c;
    }
  }
  if (quoted) fail("csv: \"{}\" byte offset {}: a quoted field is never closed", name, f.offset);
  fields.push_back(std::move(f));
  return i + 1;
}

bool parse_number(const std::string& s, float& out) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  if (b == std::string::npos) return false;
  std::string t = s.substr(b, e - b + 1);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE || !std::isfinite(v) || std::fabs(v) > 3.4e38) return false;
  out = static_cast<float>(v);
  return true;
}

}  // namespace

CsvTable parse_csv(std::string_view text, const std::string& name, const CsvOptions& options) {
  std::vector<Field> fields;
  std::vector<float> values;
  CsvTable table;
  size_t at = 0, columns = 0;
  int64_t rows = 0, line = 0;
  bool first = true;
  while (at < text.size()) {
    size_t line_start = at;
    at = split_line(text, at, options.delimiter, fields, name);
    ++line;
    if (fields.size() == 1 && fields[0].text.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    if (first) {
      first = false;
      columns = fields.size();
      float ignored;
      bool numeric =
          std::all_of(fields.begin(), fields.end(), [&](const Field& f) { return parse_number(f.text, ignored); });
      bool header =
          options.header == CsvOptions::Header::Yes || (options.header == CsvOptions::Header::Auto && !numeric);
      for (size_t c = 0; c < columns; ++c) table.columns.push_back(header ? fields[c].text : std::to_string(c));
      if (header) continue;
    }
    if (fields.size() != columns)
      fail("csv: \"{}\" line {} (byte offset {}) has {} fields, expected {}", name, line, line_start, fields.size(),
           columns);
    for (const Field& f : fields) {
      float v;
      if (!parse_number(f.text, v))
        fail("csv: \"{}\" line {} (byte offset {}), column \"{}\": \"{}\" is not a number", name, line, f.offset,
             table.columns[values.size() % columns], f.text);
      values.push_back(v);
    }
    ++rows;
  }
  if (columns == 0) fail("csv: \"{}\" holds no rows", name);
  table.values = Tensor::from_vector({rows, static_cast<int64_t>(columns)}, values);
  return table;
}

CsvTable read_csv(const std::string& path, const CsvOptions& options) {
  return parse_csv(io::read_file(path), path, options);
}

}  // namespace tandem::data
