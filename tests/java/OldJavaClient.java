// An old Java client's workload (kafka-clients 2.0.1 from Maven Central, compiled against it by
// samples/make_captures.py for kafka4-old-ak.pcap): N records produced to a topic, then read back
// in a consumer group; one JSON line of what it did.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class OldJavaClient {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], name = args[1], topic = args[2];
        int n = Integer.parseInt(args[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", name);
        p.put("linger.ms", "5");
        int produced = 0;
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, name + "-" + i)).get();
                produced++;
            }
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("client.id", name + "-consumer");
        c.put("group.id", name + "-group");
        c.put("auto.offset.reset", "earliest");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(Collections.singletonList(topic));
            long end = System.currentTimeMillis() + 30000;
            while (got.size() < n && System.currentTimeMillis() < end) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(r.value());
                }
            }
        }
        Collections.sort(got);
        StringBuilder out = new StringBuilder();
        out.append("{\"client_id\": \"").append(name).append("\", \"kafka_clients\": \"")
            .append(org.apache.kafka.common.utils.AppInfoParser.getVersion())
            .append("\", \"produced\": ").append(produced).append(", \"consumed\": [");
        for (int i = 0; i < got.size(); i++) {
            out.append(i == 0 ? "" : ", ").append('"').append(got.get(i)).append('"');
        }
        System.out.println(out.append("]}"));
    }
}
