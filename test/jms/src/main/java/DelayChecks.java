// qpid-jms and JMS 2.0 delivery delay, run by test/jms/delivery-delay.test.ts: the broker
// offers DELAYED_DELIVERY, so qpid-jms sends a producer's setDeliveryDelay as the
// x-opt-delivery-time annotation (a fixed producer's and an anonymous one's alike); the
// queue holds each message until then. Checks that nothing arrives in the first 800 ms of a
// 1500 ms delay, that both then arrive, each no sooner than 1500 ms after its send began,
// and that JMSDeliveryTime reads back as the time asked for. Usage: DelayChecks <amqp-url>
// <queue>. Prints one JSON object.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.util.*;
import jakarta.jms.Queue;

public class DelayChecks {
  static final long DELAY = 1500;

  public static void main(String[] args) throws Exception {
    ConnectionFactory cf = new JmsConnectionFactory(args[0]);
    List<String> received = new ArrayList<>();
    List<String> problems = new ArrayList<>();
    String early;
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue q = s.createQueue(args[1]);
      MessageConsumer consumer = s.createConsumer(q);
      MessageProducer fixed = s.createProducer(q);
      fixed.setDeliveryDelay(DELAY);
      MessageProducer anonymous = s.createProducer(null);
      anonymous.setDeliveryDelay(DELAY);
      long sent = System.currentTimeMillis();
      fixed.send(s.createTextMessage("fixed"));
      anonymous.send(q, s.createTextMessage("anonymous"));
      Message first = consumer.receive(800);
      early = first == null ? null : ((TextMessage) first).getText();
      // Bounded: two receives of at most 15 s each.
      for (int i = 0; i < 2; i++) {
        Message m = consumer.receive(15_000);
        long arrived = System.currentTimeMillis();
        if (m == null) break;
        String body = ((TextMessage) m).getText();
        received.add(body);
        if (arrived - sent < DELAY) problems.add(body + " arrived " + (arrived - sent) + " ms after its send");
        if (m.getJMSDeliveryTime() < sent + DELAY) problems.add(body + " has JMSDeliveryTime " + (m.getJMSDeliveryTime() - sent) + " ms after its send");
      }
    }
    Collections.sort(received);
    System.out.println("{\"early\":" + quote(early) + ",\"received\":[" + String.join(",", received.stream().map(DelayChecks::quote).toList()) + "],\"problems\":[" + String.join(",", problems.stream().map(DelayChecks::quote).toList()) + "]}");
  }

  static String quote(String s) {
    return s == null ? "null" : "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }
}
