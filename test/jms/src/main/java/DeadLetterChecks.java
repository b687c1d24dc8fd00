// qpid-jms and dead letters, run by test/jms/dead-letters.test.ts: what a JMS consumer of a
// dead-letter queue sees of an expired message's dead letter, which keeps the sender's
// absolute-expiry-time (now in the past) but no ttl. Two modes, so the test can wait for the
// broker to dead-letter the message between them:
//   DeadLetterChecks send <amqp-url> <queue> <ttl-ms> <text>
//   DeadLetterChecks receive <amqp-url> <queue> <wait-ms>
// The URL carries the client options (jms.localMessageExpiry=false, say). Prints one JSON object.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnectionFactory;

public class DeadLetterChecks {
  @SuppressWarnings("unchecked")
  public static void main(String[] args) throws Exception {
    String mode = args[0];
    ConnectionFactory cf = new JmsConnectionFactory(args[1]);
    try (Connection c = cf.createConnection()) {
      c.start();
      Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      Queue queue = s.createQueue(args[2]);
      if (mode.equals("send")) {
        MessageProducer p = s.createProducer(queue);
        p.setTimeToLive(Long.parseLong(args[3]));
        TextMessage m = s.createTextMessage(args[4]);
        p.send(m);
        System.out.println("{\"sent\":true,\"expiration\":" + m.getJMSExpiration() + "}");
      } else {
        MessageConsumer consumer = s.createConsumer(queue);
        Message m = consumer.receive(Long.parseLong(args[3]));
        if (m == null) {
          System.out.println("{\"received\":false}");
        } else {
          System.out.println("{\"received\":true,\"text\":\"" + ((TextMessage) m).getText() + "\",\"expiration\":" + m.getJMSExpiration()
              + ",\"now\":" + System.currentTimeMillis() + ",\"redelivered\":" + m.getJMSRedelivered()
              + ",\"deliveryCount\":" + m.getIntProperty("JMSXDeliveryCount")
              + ",\"properties\":\"" + String.join(" ", java.util.Collections.list((java.util.Enumeration<String>) m.getPropertyNames())) + "\"}");
        }
        consumer.close();
      }
    }
    System.exit(0);
  }
}
