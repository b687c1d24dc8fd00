// JSON text for what the test programs print (Checks.java and the Failover*.java
// programs): null; a Boolean or an Integer as itself; a Map as an object, its keys as
// strings; a Collection as an array; anything else as the string of its toString().
//
// test/jms/jvm.ts compiles this class ahead of the programs (see FailoverLink.java): it
// is public for their class loader.
import java.util.Collection;
import java.util.Map;
import java.util.StringJoiner;

public final class Json {
  private Json() {}

  public static String of(Object o) {
    if (o == null) return "null";
    if (o instanceof Boolean || o instanceof Integer) return o.toString();
    if (o instanceof Map<?, ?> m) {
      StringJoiner j = new StringJoiner(",", "{", "}");
      m.forEach((k, v) -> j.add(of(String.valueOf(k)) + ":" + of(v)));
      return j.toString();
    }
    if (o instanceof Collection<?> c) {
      StringJoiner j = new StringJoiner(",", "[", "]");
      c.forEach((v) -> j.add(of(v)));
      return j.toString();
    }
    StringBuilder b = new StringBuilder("\"");
    for (char ch : o.toString().toCharArray()) {
      if (ch == '"' || ch == '\\') b.append('\\').append(ch);
      else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
      else b.append(ch);
    }
    return b.append('"').toString();
  }
}
