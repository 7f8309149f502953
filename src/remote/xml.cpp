// A bounded XML reader over expat (see xml.h).
#include "remote/xml.h"

#include <expat.h>

#include <climits>
#include <memory>

#include <fmt/format.h>

namespace dlrun::remote {

const XmlElement* XmlElement::child(const std::string& n) const {
  for (const auto& c : children)
    if (c.name == n) return &c;
  return nullptr;
}

std::string XmlElement::child_text(const std::string& n) const {
  const XmlElement* c = child(n);
  return c ? c->text : std::string();
}

std::vector<const XmlElement*> XmlElement::all(const std::string& n) const {
  std::vector<const XmlElement*> out;
  for (const auto& c : children)
    if (c.name == n) out.push_back(&c);
  return out;
}

namespace {

struct Builder {
  XML_Parser parser = nullptr;
  XmlElement root;
  std::vector<XmlElement*> open;  ///< the elements being read, innermost last
  size_t elements = 0;
  bool have_root = false;
  std::string refused;            ///< why the handlers stopped the parser

  void stop(std::string why) {
    if (refused.empty()) refused = std::move(why);
    XML_StopParser(parser, XML_FALSE);
  }
};

std::string local_name(const XML_Char* name) {
  std::string n(name);
  const auto colon = n.find(':');
  return colon == std::string::npos ? n : n.substr(colon + 1);
}

void XMLCALL on_start(void* user, const XML_Char* name, const XML_Char**) {
  auto* b = static_cast<Builder*>(user);
  if (!b->refused.empty()) return;
  if (++b->elements > kMaxXmlElements) return b->stop(fmt::format("more than {} elements", kMaxXmlElements));
  if (static_cast<int>(b->open.size()) >= kMaxXmlDepth)
    return b->stop(fmt::format("elements nested deeper than {} levels", kMaxXmlDepth));
  if (b->open.empty()) {
    if (b->have_root) return b->stop("more than one root element");  // (expat refuses this too)
    b->have_root = true;
    b->root.name = local_name(name);
    b->open.push_back(&b->root);
    return;
  }
  XmlElement& parent = *b->open.back();
  parent.children.push_back(XmlElement{local_name(name), {}, {}});
  b->open.push_back(&parent.children.back());
}

void XMLCALL on_end(void* user, const XML_Char*) {
  auto* b = static_cast<Builder*>(user);
  if (!b->open.empty()) b->open.pop_back();
}

void XMLCALL on_text(void* user, const XML_Char* s, int len) {
  auto* b = static_cast<Builder*>(user);
  if (b->open.empty() || !b->refused.empty()) return;
  std::string& text = b->open.back()->text;
  if (text.size() + static_cast<size_t>(len) > kMaxXmlText)
    return b->stop(fmt::format("an element's text longer than {} bytes", kMaxXmlText));
  text.append(s, static_cast<size_t>(len));
}

void XMLCALL on_doctype(void* user, const XML_Char*, const XML_Char*, const XML_Char*, int) {
  static_cast<Builder*>(user)->stop("a document type declaration (S3 sends none; refused so that no entity of the "
                                    "sender's is expanded)");
}

}  // namespace

XmlElement parse_xml(const std::string& body) {
  if (body.size() > static_cast<size_t>(INT_MAX)) throw XmlError("XML body larger than 2 GiB");
  std::unique_ptr<XML_ParserStruct, void (*)(XML_Parser)> parser(XML_ParserCreate("UTF-8"), XML_ParserFree);
  if (!parser) throw XmlError("cannot create an XML parser (out of memory)");
  Builder b;
  b.parser = parser.get();
  XML_SetUserData(b.parser, &b);
  XML_SetElementHandler(b.parser, on_start, on_end);
  XML_SetCharacterDataHandler(b.parser, on_text);
  XML_SetStartDoctypeDeclHandler(b.parser, on_doctype);
  const XML_Status st = XML_Parse(b.parser, body.data(), static_cast<int>(body.size()), XML_TRUE);
  if (st != XML_STATUS_OK || !b.refused.empty()) {
    const std::string why = !b.refused.empty() ? b.refused : XML_ErrorString(XML_GetErrorCode(b.parser));
    throw XmlError(fmt::format("not a well-formed XML answer at line {}, column {}: {}",
                               XML_GetCurrentLineNumber(b.parser), XML_GetCurrentColumnNumber(b.parser) + 1, why));
  }
  if (!b.have_root) throw XmlError("an empty XML answer");
  return std::move(b.root);
}

}  // namespace dlrun::remote
