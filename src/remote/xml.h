// The XML answers of S3 and STS, read as untrusted input: parsed by expat (Debian's
// libexpat) into a small element tree, in one linear pass, with bounds a hostile or broken
// endpoint cannot get past: no document type declarations (so no entity of its own), at most
// kMaxXmlDepth levels, kMaxXmlElements elements and kMaxXmlText bytes of text in one element. CDATA sections, self-closing elements and
// character references are read as XML defines them. A body that breaks a rule is refused
// with XmlError, naming what was wrong and where (line:column).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace dlrun::remote {

/// A body that is not well-formed XML, or is beyond the bounds.
class XmlError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One element: its local name (a namespace prefix is dropped), the text directly inside it
/// (character data and CDATA, entities decoded), and its child elements in order.
struct XmlElement {
  std::string name;
  std::string text;
  std::vector<XmlElement> children;

  /// The first child named `name`, or null.
  const XmlElement* child(const std::string& name) const;
  /// The text of the first child named `name` ("" when there is none).
  std::string child_text(const std::string& name) const;
  /// Every child named `name`, in order.
  std::vector<const XmlElement*> all(const std::string& name) const;
};

inline constexpr int kMaxXmlDepth = 32;
inline constexpr size_t kMaxXmlElements = 200000;  ///< a full S3 listing page has about 10,000
inline constexpr size_t kMaxXmlText = 256 << 10;   ///< S3's longest values (keys, tokens) are ~1 KiB

/// Parse `body`; the root element is returned. Throws XmlError.
XmlElement parse_xml(const std::string& body);

}  // namespace dlrun::remote
