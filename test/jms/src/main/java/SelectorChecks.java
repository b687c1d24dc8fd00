// qpid-jms and JMS message selectors, run by test/jms/selectors.test.ts: request/reply by
// JMSCorrelationID (the replies' correlation ids are the requests' JMSMessageIDs, as
// qpid-jms hands them to the application), JMSMessageID, property selectors of every
// kind, operators on values of the wrong type and Java's numeric promotion, a
// QueueBrowser with a selector, an invalid selector, one past the broker's
// bounds, and selectors on a topic: a private subscription, a durable one (kept while
// closed, replaced when its selector changes) and a shared one.
// Usage: SelectorChecks <amqp-url> <queue-prefix>. Prints one JSON object.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.util.*;

public class SelectorChecks {
  private static Session session;

  public static void main(String[] args) throws Exception {
    String prefix = args[1];
    Map<String, String> results = new LinkedHashMap<>();
    ConnectionFactory cf = new JmsConnectionFactory(args[0]);
    try (Connection c = cf.createConnection()) {
      c.setClientID("selector-checks");
      c.start();
      session = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      results.put("requestReply", requestReply(prefix + ".requests", prefix + ".replies"));
      results.put("messageId", messageId(prefix + ".ids"));
      results.putAll(properties(prefix + ".props"));
      results.putAll(types(prefix + ".types"));
      results.put("browser", browser(prefix + ".browse"));
      results.put("invalid", refusal(() -> session.createConsumer(session.createQueue(prefix + ".bad"), "colour = ")));
      results.put("tooLong", refusal(() -> session.createConsumer(session.createQueue(prefix + ".bad"), "a = '" + "x".repeat(5000) + "'")));
      results.putAll(topics("amq.topic/" + prefix + ".news"));
      results.put("leftForPlain", String.join(",", drain(session.createConsumer(session.createQueue(prefix + ".props")))));
    }
    StringBuilder out = new StringBuilder("{");
    for (Map.Entry<String, String> e : results.entrySet()) {
      if (out.length() > 1) out.append(',');
      out.append('"').append(e.getKey()).append("\":\"").append(e.getValue().replace("\\", "\\\\").replace("\"", "\\\"")).append('"');
    }
    System.out.println(out.append('}'));
    System.exit(0);
  }

  /** Requests answered by a responder; the requester takes each reply by JMSCorrelationID, out of order. */
  static String requestReply(String requests, String replies) throws JMSException {
    MessageProducer p = session.createProducer(session.createQueue(requests));
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      TextMessage m = session.createTextMessage("request-" + i);
      p.send(m);
      ids.add(m.getJMSMessageID());
    }
    MessageConsumer responder = session.createConsumer(session.createQueue(requests));
    MessageProducer answer = session.createProducer(session.createQueue(replies));
    for (int i = 0; i < 3; i++) {
      TextMessage req = (TextMessage) responder.receive(5000);
      TextMessage reply = session.createTextMessage("reply-" + req.getText().substring("request-".length()));
      reply.setJMSCorrelationID(req.getJMSMessageID());
      answer.send(reply);
    }
    responder.close();
    List<String> got = new ArrayList<>();
    for (int i : new int[] {2, 0, 1}) {
      MessageConsumer requester = session.createConsumer(session.createQueue(replies), "JMSCorrelationID = '" + ids.get(i) + "'");
      Message m = requester.receive(5000);
      got.add(m == null ? "none" : ((TextMessage) m).getText() + (m.getJMSCorrelationID().equals(ids.get(i)) ? "" : "(wrong id)"));
      requester.close();
    }
    return String.join(",", got);
  }

  static String messageId(String queue) throws JMSException {
    MessageProducer p = session.createProducer(session.createQueue(queue));
    List<String> ids = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      TextMessage m = session.createTextMessage("m" + i);
      p.send(m);
      ids.add(m.getJMSMessageID());
    }
    MessageConsumer c = session.createConsumer(session.createQueue(queue), "JMSMessageID = '" + ids.get(1) + "'");
    List<String> got = drain(c);
    c.close();
    return String.join(",", got);
  }

  /** Messages with properties of every kind; each selector's consumer drains what it selects. */
  static Map<String, String> properties(String queue) throws JMSException {
    MessageProducer p = session.createProducer(session.createQueue(queue));
    String[] colours = {"blue", "green", "red", "blue", "green", "red"};
    for (int i = 0; i < colours.length; i++) {
      TextMessage m = session.createTextMessage("p" + i);
      m.setStringProperty("colour", colours[i]);
      m.setIntProperty("weight", i);
      m.setDoubleProperty("price", 9.0 + i * 0.25);
      m.setBooleanProperty("urgent", i % 2 == 0);
      m.setStringProperty("name", i == 4 ? "ab_x" : "abcx");
      m.setJMSType(i < 3 ? "order" : "invoice");
      p.send(m, DeliveryMode.PERSISTENT, i, 0);
    }
    Map<String, String> out = new LinkedHashMap<>();
    // In turn, each taking its messages off the queue before the next looks.
    String[][] selectors = {
      {"likeEscape", "name LIKE 'ab\\_%' ESCAPE '\\'"},
      {"inBetween", "colour IN ('blue', 'green') AND weight BETWEEN 1 AND 4"},
      {"doubleBoolean", "price >= 9.5 AND urgent = TRUE"},
      {"typePriority", "JMSType = 'invoice' AND JMSPriority >= 5"},
    };
    for (String[] s : selectors) {
      MessageConsumer c = session.createConsumer(session.createQueue(queue), s[1]);
      out.put(s[0], String.join(",", drain(c)));
      c.close();
    }
    return out;
  }

  /** Operators on values of another type than they take, and a long compared with a double, as Java and Artemis see them. */
  static Map<String, String> types(String queue) throws JMSException {
    MessageProducer p = session.createProducer(session.createQueue(queue));
    TextMessage m = session.createTextMessage("q0");
    m.setStringProperty("colour", "blue");
    m.setIntProperty("weight", 0);
    m.setLongProperty("big", 9007199254740993L);
    p.send(m);
    Map<String, String> out = new LinkedHashMap<>();
    String[][] selectors = {
      // A string is neither between two numbers nor outside them; IN on a number is unknown: none of these selects.
      {"wrongTypes", "colour NOT BETWEEN 1 AND 9 OR weight NOT IN ('1') OR NOT (weight IN ('1'))"},
      // The long made a double to compare with one (2^53 + 1 rounds to 2^53); LIKE on a number is false, NOT LIKE true.
      {"promotion", "big = 9007199254740992.0 AND weight NOT LIKE 'x%'"},
    };
    for (String[] s : selectors) {
      MessageConsumer c = session.createConsumer(session.createQueue(queue), s[1]);
      out.put(s[0], String.join(",", drain(c)));
      c.close();
    }
    return out;
  }

  /** A private, a durable and a shared subscription with selectors, each draining what it keeps. */
  static Map<String, String> topics(String address) throws JMSException {
    Topic topic = session.createTopic(address);
    MessageProducer p = session.createProducer(topic);
    Map<String, String> out = new LinkedHashMap<>();
    MessageConsumer priv = session.createConsumer(topic, "colour = 'blue'");
    MessageConsumer durable = session.createDurableConsumer(topic, "sel-durable", "colour = 'red'", false);
    durable.close();
    MessageConsumer shared = session.createSharedConsumer(topic, "sel-shared", "colour <> 'red'");
    String[] colours = {"blue", "red", "green", "red", "blue"};
    for (int i = 0; i < colours.length; i++) {
      TextMessage m = session.createTextMessage("t" + i);
      m.setStringProperty("colour", colours[i]);
      p.send(m);
    }
    out.put("topicPrivate", String.join(",", drain(priv)));
    out.put("topicShared", String.join(",", drain(shared)));
    // The durable subscription kept what it selects while it had no consumer.
    durable = session.createDurableConsumer(topic, "sel-durable", "colour = 'red'", false);
    out.put("topicDurable", String.join(",", drain(durable)));
    durable.close();
    TextMessage late = session.createTextMessage("t5");
    late.setStringProperty("colour", "blue");
    p.send(late);
    // Another selector under the same name: a new subscription (JMS: as if unsubscribed first).
    durable = session.createDurableConsumer(topic, "sel-durable", "colour = 'blue'", false);
    List<String> replaced = drain(durable);
    TextMessage later = session.createTextMessage("t6");
    later.setStringProperty("colour", "blue");
    p.send(later);
    replaced.addAll(drain(durable));
    out.put("topicDurableReplaced", String.join(",", replaced));
    durable.close();
    session.unsubscribe("sel-durable");
    priv.close();
    shared.close();
    return out;
  }

  static String browser(String queue) throws JMSException {
    MessageProducer p = session.createProducer(session.createQueue(queue));
    for (int i = 0; i < 4; i++) {
      TextMessage m = session.createTextMessage("b" + i);
      m.setIntProperty("n", i);
      p.send(m);
    }
    QueueBrowser b = session.createBrowser(session.createQueue(queue), "n >= 2");
    List<String> seen = new ArrayList<>();
    for (Enumeration<?> e = b.getEnumeration(); e.hasMoreElements(); ) seen.add(((TextMessage) e.nextElement()).getText());
    b.close();
    return String.join(",", seen) + "|" + String.join(",", drain(session.createConsumer(session.createQueue(queue))));
  }

  interface Attempt {
    void run() throws JMSException;
  }

  /** What an attempt threw: its class and message, or "taken". */
  static String refusal(Attempt a) {
    try {
      a.run();
      return "taken";
    } catch (JMSException e) {
      return e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  static List<String> drain(MessageConsumer c) throws JMSException {
    List<String> got = new ArrayList<>();
    // Bounded: each pass takes a message or ends.
    for (Message m = c.receive(1000); m != null && got.size() < 100; m = c.receive(300)) got.add(((TextMessage) m).getText());
    return got;
  }
}
