// qpid-jms and message groups (JMSXGroupID, sent as the AMQP group-id), run by
// test/jms/message-groups.test.ts: one producer sends interleaved groups to a queue
// declared with --message-groups; two consumers on two sessions (CLIENT_ACKNOWLEDGE, small
// prefetch) take turns receiving, each holding up to six unacknowledged messages (more than
// there are groups, so on a queue without groups each would soon get what the other holds). A
// consumer must never receive a message of a group the other holds unacknowledged, and
// every group must arrive in order. Usage: GroupChecks <amqp-url> <queue> <groups> <per-group>.
// Prints one JSON object.
import jakarta.jms.*;
import org.apache.qpid.jms.JmsConnectionFactory;
import java.util.*;

public class GroupChecks {
  public static void main(String[] args) throws Exception {
    String url = args[0] + "?jms.prefetchPolicy.all=2";
    String queue = args[1];
    int groups = Integer.parseInt(args[2]);
    int perGroup = Integer.parseInt(args[3]);
    int total = groups * perGroup;
    List<String> violations = new ArrayList<>();
    List<String> outOfOrder = new ArrayList<>();
    int[] perConsumer = new int[2];
    int received = 0;
    ConnectionFactory cf = new JmsConnectionFactory(url);
    try (Connection c = cf.createConnection()) {
      c.start();
      Session ps = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
      MessageProducer p = ps.createProducer(ps.createQueue(queue));
      for (int seq = 0; seq < perGroup; seq++) {
        for (int g = 0; g < groups; g++) {
          TextMessage m = ps.createTextMessage("G" + g + ":" + seq);
          m.setStringProperty("JMSXGroupID", "G" + g);
          p.send(m);
        }
      }
      Session[] sessions = {c.createSession(false, Session.CLIENT_ACKNOWLEDGE), c.createSession(false, Session.CLIENT_ACKNOWLEDGE)};
      MessageConsumer[] consumers = {sessions[0].createConsumer(sessions[0].createQueue(queue)), sessions[1].createConsumer(sessions[1].createQueue(queue))};
      List<List<Message>> held = List.of(new ArrayList<>(), new ArrayList<>());
      Map<String, Integer> lastSeq = new HashMap<>();
      // Bounded: every turn takes a message or waits 200 ms, and the turns are counted.
      for (int turn = 0; turn < total * 20 && received < total; turn++) {
        int i = turn % 2;
        Message m = consumers[i].receive(200);
        if (m != null) {
          String group = m.getStringProperty("JMSXGroupID");
          String body = ((TextMessage) m).getText();
          int seq = Integer.parseInt(body.split(":")[1]);
          for (Message h : held.get(1 - i)) {
            if (group.equals(h.getStringProperty("JMSXGroupID"))) {
              violations.add("consumer " + i + " got " + body + " while the other holds " + ((TextMessage) h).getText());
              break;
            }
          }
          Integer last = lastSeq.get(group);
          if (last != null && seq <= last) outOfOrder.add(body + " after " + last);
          lastSeq.put(group, seq);
          held.get(i).add(m);
          perConsumer[i]++;
          received++;
        }
        if (m == null || held.get(i).size() >= 6) {
          if (!held.get(i).isEmpty()) held.get(i).get(held.get(i).size() - 1).acknowledge();
          held.get(i).clear();
        }
      }
      for (int i = 0; i < 2; i++) if (!held.get(i).isEmpty()) held.get(i).get(0).acknowledge();
    }
    System.out.println("{\"received\":" + received + ",\"violations\":" + violations.size() + ",\"outOfOrder\":" + outOfOrder.size()
        + ",\"perConsumer\":[" + perConsumer[0] + "," + perConsumer[1] + "],\"firstProblem\":\"" + (violations.isEmpty() ? (outOfOrder.isEmpty() ? "" : outOfOrder.get(0)) : violations.get(0)) + "\"}");
    System.exit(0);
  }
}
